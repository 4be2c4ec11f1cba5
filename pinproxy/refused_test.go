package pinproxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// The fast version of the refused-session tests: on loopback, a node that
// accepts a connection and closes it at once, as a P2P daemon does for a
// banned address or full inbound slots (internal/testing/btcdlab runs the
// same against real btcd nodes).

// refuser is a Line node that, while refuse is set, closes each connection
// as soon as it accepts it.
func refuser(refuse *atomic.Bool) pinproxytest.Handler {
	return func(n *pinproxytest.Node, c net.Conn) {
		if refuse.Load() {
			return // the node closes c
		}
		pinproxytest.Line(n, c)
	}
}

// session is one client session through the proxy: it announces id, pings,
// and returns the conn and the node that answered, or "" (and a closed
// conn) when the session was ended before an answer. The conn is closed at
// cleanup.
func session(t *testing.T, proxy, id string) (net.Conn, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, pinproxytest.WaitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "id "+id+"\nping\n"); err != nil {
		c.Close()
		return c, ""
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		if pinproxytest.IsTimeout(err) {
			t.Fatalf("client %s: no answer and not closed within %v", id, pinproxytest.WaitFor)
		}
		c.Close()
		return c, ""
	}
	name, _, _ := strings.Cut(line, " ")
	return c, name
}

// settle redials like mwebd until a session is answered, and returns the
// node it landed on and the sessions that were ended before an answer.
// Before each redial it waits for p to have seen the session end (a
// client that redials after a second, as mwebd and btcd's do).
func settle(t *testing.T, p *pinproxy.Proxy, proxy, id string) (on string, disconnects int) {
	t.Helper()
	for range 20 {
		settled(t, p)
		before := p.Totals().Live
		if _, on := session(t, proxy, id); on != "" {
			return on, disconnects
		}
		disconnects++
		testkit.WaitFor(t, "the proxy to see the session end", func() bool { return p.Totals().Live == before })
	}
	t.Fatalf("client %s: 20 sessions in a row ended", id)
	return "", disconnects
}

// settled waits until every client p handles is pinned: none dialing,
// none ending.
func settled(t *testing.T, p *pinproxy.Proxy) {
	t.Helper()
	testkit.WaitFor(t, "the proxy to settle", func() bool {
		pinned := 0
		for _, s := range p.Stats() {
			pinned += s.Live
		}
		return p.Totals().Live == pinned
	})
}

var refusingReason = regexp.MustCompile(`^refusing sessions: 3 ended within [0-9.]+(µs|ms)$`)

// An upstream that accepts and closes at once is refusing sessions after
// three (DefaultRefusedSessions) in a row: it is tried last from then on,
// Stats, the metrics and the log say so, and it counts as down.
func TestRefusedSessionsTriedLast(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	a := pinproxytest.New(t, "A", refuser(&refuse))
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1, Logger: log})
	addr := serve(t, p)

	on, disconnects := settle(t, p, addr, "c0")
	if on != "B" || disconnects != pinproxy.DefaultRefusedSessions {
		t.Fatalf("first client settled on %s after %d disconnects, want B after %d", on, disconnects, pinproxy.DefaultRefusedSessions)
	}
	sa := stat(p, a.Addr)
	if !refusingReason.MatchString(sa.Refusing) || sa.State != "down" || sa.RefusedSessions != 3 {
		t.Fatalf("A after 3 refused sessions: refusing %q, state %s, %d refused; want %v, down, 3",
			sa.Refusing, sa.State, sa.RefusedSessions, refusingReason)
	}
	if sa.Failures != 1 || sa.LastError != sa.Refusing {
		t.Errorf("A: %d failures, last error %q; want the refusal counted as one failed dial", sa.Failures, sa.LastError)
	}
	want := fmt.Sprintf(`level=WARN msg="upstream refuses sessions; trying it last" upstream=%s reason="refusing sessions: 3 ended within `, a.Addr)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q", want)
	}
	// Every later client goes to B at once, although A holds none.
	for i := 1; i <= 4; i++ {
		if on, n := settle(t, p, addr, fmt.Sprint("c", i)); on != "B" || n != 0 {
			t.Fatalf("client c%d settled on %s after %d disconnects, want B at once", i, on, n)
		}
	}
	if got := stat(p, b.Addr).RefusedSessions; got != 0 {
		t.Errorf("B refused %d sessions, want 0", got)
	}
}

// A client that hangs up first never counts against the upstream, however
// soon; nor does an upstream that ends a session after RefusedWithin, or
// after sending more than RefusedBytes.
func TestRefusedSessionsNotClientHangUps(t *testing.T) {
	big := pinproxytest.New(t, "big", func(_ *pinproxytest.Node, c net.Conn) {
		c.Write(make([]byte, 64)) // then closes: more than RefusedBytes
	})
	slow := pinproxytest.New(t, "slow", func(_ *pinproxytest.Node, c net.Conn) {
		time.Sleep(150 * time.Millisecond) // then closes: after RefusedWithin
	})
	line := pinproxytest.New(t, "line", pinproxytest.Line)
	for _, tt := range []struct {
		node *pinproxytest.Node
		hang bool // the client hangs up at once
	}{{line, true}, {big, false}, {slow, false}} {
		p := newProxy(t, pinproxy.Config{
			Upstreams: []string{tt.node.Addr}, RebalanceInterval: -1,
			RefusedWithin: 100 * time.Millisecond, RefusedBytes: 32,
		})
		addr := serve(t, p)
		for range 5 {
			c := mustDial(t, addr)
			if tt.hang {
				c.Close()
				continue
			}
			c.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
			if _, err := io.Copy(io.Discard, c); pinproxytest.IsTimeout(err) {
				t.Fatalf("%s: the session was not closed", tt.node.Name)
			}
			c.Close() // as a client does when its peer has ended the stream
		}
		testkit.WaitFor(t, tt.node.Name+"'s sessions to end", func() bool {
			s := stat(p, tt.node.Addr)
			return s.Dials == 5 && s.Dialing == 0 && s.Live == 0 // every client dialed for, and gone
		})
		if s := stat(p, tt.node.Addr); s.RefusedSessions != 0 || s.Refusing != "" || s.State != "up" {
			t.Errorf("%s: %d refused, refusing %q, state %s; want none refused, up", tt.node.Name, s.RefusedSessions, s.Refusing, s.State)
		}
	}
}

// An upstream that closes at once refuses the session even when the
// client lingers past RefusedWithin after reading the upstream's end and
// only then writes (its bytes draw a reset): what counts is when the
// upstream ended it. One that only half-closes and goes on reading holds
// the session as long as the client keeps it.
func TestRefusedSessionsClientLingers(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	closer := pinproxytest.New(t, "closer", refuser(&refuse))
	halfCloser := pinproxytest.New(t, "half-closer", func(_ *pinproxytest.Node, c net.Conn) {
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
	})
	const within = 100 * time.Millisecond
	for _, tt := range []struct {
		node    *pinproxytest.Node
		refused int64
	}{{closer, 3}, {halfCloser, 0}} {
		p := newProxy(t, pinproxy.Config{Upstreams: []string{tt.node.Addr}, RebalanceInterval: -1, RefusedWithin: within})
		addr := serve(t, p)
		for i := range pinproxy.DefaultRefusedSessions {
			c := mustDial(t, addr)
			c.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
			if _, err := io.Copy(io.Discard, c); pinproxytest.IsTimeout(err) {
				t.Fatalf("%s, session %d: the upstream's end did not reach the client", tt.node.Name, i)
			}
			time.Sleep(2 * within) // the client notices late, then pings
			for range 3 {
				if _, err := c.Write([]byte("ping\n")); err != nil {
					break
				}
				time.Sleep(within / 4)
			}
			c.Close()
			testkit.WaitFor(t, "the session to end", func() bool { return stat(p, tt.node.Addr).Live == 0 })
		}
		s := stat(p, tt.node.Addr)
		if s.RefusedSessions != tt.refused || (tt.refused == 3) != refusingReason.MatchString(s.Refusing) {
			t.Errorf("%s after 3 sessions: %d refused, refusing %q; want %d refused", tt.node.Name, s.RefusedSessions, s.Refusing, tt.refused)
		}
	}
}

// refusedLab is a proxy in front of A, which refuses sessions while
// refuse is set (at first), and B, which holds them; rounds are run by
// hand, RefusedWithin is 200 ms and the proxy's clock moves when told.
type refusedLab struct {
	refuse atomic.Bool
	a, b   *pinproxytest.Node
	logs   *testkit.LogBuffer
	clock  fakeClock
	p      *pinproxy.Proxy
	addr   string
}

func newRefusedLab(t *testing.T) *refusedLab {
	l := &refusedLab{}
	l.refuse.Store(true)
	l.a = pinproxytest.New(t, "A", refuser(&l.refuse))
	l.b = pinproxytest.New(t, "B", pinproxytest.Line)
	var log *slog.Logger
	log, l.logs = testLogger(t)
	cfg := pinproxy.Config{
		Upstreams: []string{l.a.Addr, l.b.Addr}, RebalanceInterval: -1, Logger: log,
		RefusedWithin: 200 * time.Millisecond,
	}
	pinproxy.SetClockForTest(&cfg, l.clock.now)
	l.p = newProxy(t, cfg)
	l.addr = serve(t, l.p)
	return l
}

// An upstream refusing sessions answers again once a session dialed after
// its last refusal is held: after its back-off one client tries it, and
// when that session lives past RefusedWithin it takes clients again.
func TestRefusingUpstreamHoldsAgain(t *testing.T) {
	l := newRefusedLab(t)
	refuse, a, logs, clock, p, addr := &l.refuse, l.a, l.logs, &l.clock, l.p, l.addr
	if on, _ := settle(t, p, addr, "c0"); on != "B" || stat(p, a.Addr).Refusing == "" {
		t.Fatalf("c0 on %s, A refusing %q; want B, A refusing", on, stat(p, a.Addr).Refusing)
	}

	// A back, but still in its back-off: clients go to B.
	refuse.Store(false)
	if _, on := session(t, addr, "c1"); on != "B" {
		t.Fatalf("c1 on %s during A's back-off, want B", on)
	}
	// After it, one client tries A, and is held.
	clock.advance(pinproxy.DefaultFailedBackoff)
	if _, on := session(t, addr, "c2"); on != "A" {
		t.Fatalf("c2 on %s after A's back-off, want A", on)
	}
	testkit.WaitFor(t, "A to hold c2's session", func() bool { return stat(p, a.Addr).Refusing == "" })
	if s := stat(p, a.Addr); s.State != "up" {
		t.Errorf("A after a session held: state %s, want up", s.State)
	}
	if want := `msg="upstream holds sessions again" upstream=` + a.Addr; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q", want)
	}
}

// A rebalance round never moves a connection to an upstream that refuses
// sessions: its test-connect must hold a session for RefusedWithin, not
// only connect. Once A holds one, the round moves a connection back
// ("answers again"). A moved connection whose redial A refuses is a failed
// move, and no round moves to A again until one of its sessions holds.
func TestRebalanceAndRefusedSessions(t *testing.T) {
	l := newRefusedLab(t)
	refuse, a, b, logs, clock, p, addr := &l.refuse, l.a, l.b, l.logs, &l.clock, l.p, l.addr
	ctx := context.Background()

	settle(t, p, addr, "c0")
	c1, _ := pinproxytest.Dial(t, addr, "c1")
	if s := stat(p, b.Addr); s.Live != 2 {
		t.Fatalf("B holds %d, want both clients", s.Live)
	}

	// A accepts connections and refuses sessions: a round's test-connect
	// connects, A ends the session at once, and nothing moves.
	if err := p.Rebalance(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Ping(); p.Totals().Moves != 0 || err != nil {
		t.Fatalf("a round moved a connection to an upstream refusing sessions (c1: %v)", err)
	}
	if !strings.Contains(logs.String(), `msg="idle node still refuses sessions; nothing moved"`) {
		t.Error("the round did not say the idle node refuses sessions")
	}

	// A holds sessions again: the round's test-connect holds one, and the
	// newest connection moves back.
	refuse.Store(false)
	if err := p.Rebalance(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Totals().Moves != 1 || !c1.Closed() {
		t.Fatal("the round did not move a connection back to A once it held a session")
	}
	if want := fmt.Sprintf(`msg="answers again; moving a connection" from=%s to=%s`, b.Addr, a.Addr); !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q", want)
	}
	if s := stat(p, a.Addr); s.Refusing != "" || s.State != "up" {
		t.Errorf("A after the held test-connect: refusing %q, state %s", s.Refusing, s.State)
	}

	// But A refuses the moved client's redial: a failed move.
	refuse.Store(true)
	if _, on := session(t, addr, "c1"); on != "" {
		t.Fatalf("c1's redial answered by %s, want it refused by A", on)
	}
	testkit.WaitFor(t, "the failed move to count", func() bool { return p.Totals().FailedMoves == 1 })
	if want := `msg="rebalance: the moved connection's redial was refused; no moves to it until it holds a session" upstream=` + a.Addr; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q", want)
	}
	// c1 settles on B; A is back, but no round moves to it (nor even
	// test-connects it) until a session of its own holds.
	if on, _ := settle(t, p, addr, "c1"); on != "B" {
		t.Fatalf("c1 settled on %s, want B", on)
	}
	refuse.Store(false)
	dials := stat(p, a.Addr).Dials
	if err := p.Rebalance(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Totals().Moves != 1 || stat(p, a.Addr).Dials != dials {
		t.Fatalf("a round after the failed move: %d moves, A dialed %d→%d; want nothing", p.Totals().Moves, dials, stat(p, a.Addr).Dials)
	}
	// A new client's session on A holds (after A's back-off): moves resume.
	clock.advance(pinproxy.DefaultFailedBackoff)
	c2, on := session(t, addr, "c2")
	if on != "A" {
		t.Fatalf("c2 on %s after A's back-off, want A", on)
	}
	testkit.WaitFor(t, "A to hold c2's session", func() bool { return stat(p, a.Addr).Refusing == "" })
	c2.Close()
	testkit.WaitFor(t, "c2's session to end", func() bool { return stat(p, a.Addr).Live == 0 })
	if err := p.Rebalance(ctx); err != nil {
		t.Fatal(err)
	}
	if got := p.Totals().Moves; got != 2 {
		t.Fatalf("moves after A held a session = %d, want 2", got)
	}
}

// An upstream that answered again after refusing sessions, on a
// test-connect's word only, takes one move at a time: the next round
// moves nothing to it until the moved client's redial has been held
// there.
func TestRebalanceProbationAfterRefusing(t *testing.T) {
	l := newRefusedLab(t)
	ctx := context.Background()
	settle(t, l.p, l.addr, "c0")
	var clients []*pinproxytest.Client
	for _, id := range []string{"c1", "c2", "c3"} {
		cl, _ := pinproxytest.Dial(t, l.addr, id)
		clients = append(clients, cl)
	}
	if s := stat(l.p, l.b.Addr); s.Live != 4 {
		t.Fatalf("B holds %d, want all four clients", s.Live)
	}
	l.refuse.Store(false)
	if err := l.p.Rebalance(ctx); err != nil || l.p.Totals().Moves != 1 || !clients[2].Closed() {
		t.Fatalf("first round: %v, %d moves; want c3 moved", err, l.p.Totals().Moves)
	}
	// c3 has not redialed yet: the next round leaves A alone.
	dials := stat(l.p, l.a.Addr).Dials
	if err := l.p.Rebalance(ctx); err != nil || l.p.Totals().Moves != 1 || stat(l.p, l.a.Addr).Dials != dials {
		t.Fatalf("a round before the moved client's redial: %v, %d moves, A dialed %d→%d; want nothing",
			err, l.p.Totals().Moves, dials, stat(l.p, l.a.Addr).Dials)
	}
	// Its redial lands on A and is held: the next round moves again.
	if on := clients[2].Redial(); on != "A" {
		t.Fatalf("c3's redial landed on %s, want A", on)
	}
	testkit.WaitFor(t, "the next round to move once A held c3's redial", func() bool {
		if err := l.p.Rebalance(ctx); err != nil {
			t.Fatal(err)
		}
		return l.p.Totals().Moves == 2
	})
}

// A failed move stops moves to the upstream only for its back-off: after
// it, with no client's session there to show it holds (least-used dialing
// sends none while the others answer), a round test-connects it, holding
// the session for RefusedWithin, and moves one connection once it holds.
func TestRebalanceAfterFailedMoveBackoff(t *testing.T) {
	l := newRefusedLab(t)
	refuse, a, clock, p, addr := &l.refuse, l.a, &l.clock, l.p, l.addr
	ctx := context.Background()
	settle(t, p, addr, "c0")
	c1, _ := pinproxytest.Dial(t, addr, "c1")
	refuse.Store(false)
	if err := p.Rebalance(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Totals().Moves != 1 || !c1.Closed() {
		t.Fatal("the round did not move c1 to A")
	}
	refuse.Store(true)
	if _, on := session(t, addr, "c1"); on != "" {
		t.Fatalf("c1's redial answered by %s, want it refused by A", on)
	}
	testkit.WaitFor(t, "the failed move to count", func() bool { return p.Totals().FailedMoves == 1 })
	c1b, _ := pinproxytest.Dial(t, addr, "c1")
	if s := stat(p, a.Addr); s.Live != 0 {
		t.Fatalf("A holds %d after the failed move, want 0", s.Live)
	}

	// A holds sessions again, but within the back-off no round moves.
	refuse.Store(false)
	if err := p.Rebalance(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Totals().Moves != 1 {
		t.Fatal("a round within the failed move's back-off moved a connection")
	}
	// After it, the round's held test-connect is enough.
	clock.advance(pinproxy.DefaultFailedBackoff)
	if err := p.Rebalance(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Totals().Moves != 2 || !c1b.Closed() {
		t.Fatalf("moves after the back-off = %d, want 2 (the newest, c1, moved)", p.Totals().Moves)
	}
}

// An upstream whose move failed, then went down by the health checks (its
// process gone: connects refused) and came back up, is another process:
// what its sessions said is forgotten, and the next round moves a
// connection to it at once ("answers again"), as after any outage.
func TestRebalanceAfterFailedMoveRestart(t *testing.T) {
	var refuse atomic.Bool
	a := pinproxytest.New(t, "A", refuser(&refuse))
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1, Logger: log,
		RefusedWithin: 200 * time.Millisecond,
		CheckInterval: 20 * time.Millisecond, CheckRise: 2, CheckFall: 1,
	})
	addr := serve(t, p)
	ctx := context.Background()
	a.Stop() // both clients land on B
	testkit.WaitFor(t, "A down", func() bool { return stat(p, a.Addr).State == "down" })
	pinproxytest.Dial(t, addr, "c0")
	pinproxytest.Dial(t, addr, "c1")
	a.Start()
	testkit.WaitFor(t, "A up", func() bool { return stat(p, a.Addr).State == "up" })

	// The round moves c1 to A, which then ends its redial: a failed move.
	if err := p.Rebalance(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Totals().Moves != 1 {
		t.Fatalf("the round after A came up moved %d, want 1", p.Totals().Moves)
	}
	refuse.Store(true)
	if _, on := session(t, addr, "c1"); on != "" {
		t.Fatalf("c1's redial answered by %s, want it refused by A", on)
	}
	testkit.WaitFor(t, "the failed move to count", func() bool { return p.Totals().FailedMoves == 1 })
	settle(t, p, addr, "c1")
	moves := p.Totals().Moves

	// A's process goes and comes back, refusing nothing. (A may be down
	// already, by a check its refusal failed: wait for a refused connect.)
	a.Stop()
	testkit.WaitFor(t, "the checks to find A gone", func() bool {
		return stat(p, a.Addr).State == "down" && strings.Contains(stat(p, a.Addr).LastError, "connection refused")
	})
	refuse.Store(false)
	a.Start()
	testkit.WaitFor(t, "A up", func() bool { return stat(p, a.Addr).State == "up" })
	if err := p.Rebalance(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Totals().Moves != moves+1 {
		t.Fatalf("moves after A came back = %d, want %d", p.Totals().Moves, moves+1)
	}
	if want := fmt.Sprintf(`msg="answers again; moving a connection" from=%s to=%s`, b.Addr, a.Addr); !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q", want)
	}
}

// A node with one free inbound slot, behind health checks twice as
// frequent as the rebalance rounds, gets one connection back, and on the
// way no two of the proxy's connections meet at its slot: a round's
// test-connect waits for a check's and takes its outcome, a check is left
// out while a round's test-connect is there or a moved client's redial is
// due, and none starts just as another ended. Before, each round's
// test-connect met a check's holding the one slot (btcd with --maxpeers,
// -check-interval 1s, -rebalance-interval 2s: the connection moved back
// after 20 s to a minute and more).
func TestOneFreeSlotBehindChecks(t *testing.T) {
	var slot lingerSlot
	a := pinproxytest.New(t, "A", slot.handle)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	// A peer of A's own takes its slot.
	own, err := net.Dial("tcp", a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	testkit.WaitFor(t, "A's slot taken", func() bool { return slot.taken.Load() == 1 })

	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams: []string{a.Addr, b.Addr}, Logger: log,
		RefusedWithin:     200 * time.Millisecond, // checks while A refused hold their sessions for two intervals
		FailedBackoff:     time.Minute,            // a plain connect does not say A answers again while the test runs
		CheckInterval:     100 * time.Millisecond,
		RebalanceInterval: 200 * time.Millisecond,
	})
	addr := serve(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range 4 {
		wg.Go(func() { redialer(ctx, addr) })
	}
	testkit.WaitFor(t, "the clients on B", func() bool { return stat(p, b.Addr).Live == 4 })
	testkit.WaitFor(t, "A down by the checks", func() bool { return stat(p, a.Addr).State == "down" })

	own.Close() // the slot frees
	testkit.WaitFor(t, "A's slot free", func() bool { return slot.taken.Load() == 0 })
	before := slot.refused.Load()
	testkit.WaitFor(t, "a connection moved back to A", func() bool { return stat(p, a.Addr).Live == 1 })
	if n := slot.refused.Load() - before; n > 0 || strings.Contains(logs.String(), "redial was refused") {
		t.Errorf("%d of the proxy's connections met another at A's free slot", n)
	}
	// It stays there, and the others on B: A's slot is full again.
	time.Sleep(time.Second)
	if sa, sb := stat(p, a.Addr), stat(p, b.Addr); sa.Live != 1 || sb.Live != 3 {
		t.Fatalf("a second after the move: A holds %d, B %d; want 1 and 3", sa.Live, sb.Live)
	}
	if n := strings.Count(logs.String(), "moving a connection"); n != 1 {
		t.Errorf("%d moves, want 1", n)
	}
}
