package pinproxy_test

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// lingerSlot is a Line node with one inbound slot that it lets go of
// linger after a connection ends, as btcd frees a peer's slot a moment
// after the peer's connection closes: a connection while the slot is
// taken is closed at once, and counted.
type lingerSlot struct {
	linger  time.Duration
	taken   atomic.Int32
	refused atomic.Int32
}

func (s *lingerSlot) handle(n *pinproxytest.Node, c net.Conn) {
	if s.taken.Add(1) > 1 {
		s.taken.Add(-1)
		s.refused.Add(1)
		return
	}
	pinproxytest.Line(n, c)
	time.Sleep(s.linger)
	s.taken.Add(-1)
}

// pingThrough dials the proxy, announces id and returns the name of the
// node that answers a ping, or the error.
func pingThrough(addr, id string) (string, net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, pinproxytest.WaitFor)
	if err != nil {
		return "", nil, err
	}
	c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	if _, err := io.WriteString(c, "id "+id+"\nping\n"); err != nil {
		c.Close()
		return "", nil, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		return "", nil, err
	}
	c.SetDeadline(time.Time{})
	name, _, _ := strings.Cut(line, " ")
	return name, c, nil
}

// A drain moves a removed upstream's connection no sooner than the probe
// gap after the test-connect that answered for it, as a round does: a
// client that redials at once finds a node that frees its slot a moment
// after a connection closes with the slot free again.
func TestDrainMovesAfterTheGap(t *testing.T) {
	slot := lingerSlot{linger: 30 * time.Millisecond} // under the 100 ms gap
	a := pinproxytest.New(t, "A", slot.handle)
	r := pinproxytest.New(t, "R", pinproxytest.Line)
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams: []string{r.Addr}, RebalanceInterval: -1, DrainRemoved: time.Millisecond,
		Logger: log,
	})
	addr := serve(t, p)
	cl, on := pinproxytest.Dial(t, addr, "c1")
	if on != "R" {
		t.Fatalf("c1 landed on %s, want R", on)
	}
	if err := p.SetUpstreams([]string{a.Addr}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // DrainRemoved passes
	if err := p.Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !cl.Closed() {
		t.Fatal("the drain did not move c1")
	}
	// c1 redials at once.
	on, c, err := pingThrough(addr, "c1")
	if err == nil {
		defer c.Close()
	}
	if n := slot.refused.Load(); n > 0 || err != nil || on != "A" {
		t.Fatalf("the drained client's redial: on %q, err %v; %d of the proxy's connections met another at A's slot", on, err, n)
	}
}

// No health check goes to the upstream a drained client's redial is due
// at, as none goes to one a rebalance move's redial is due at: it would
// take the slot the redial needs.
func TestNoCheckWhileDrainedRedialDue(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	r := pinproxytest.New(t, "R", pinproxytest.Line)
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams: []string{r.Addr}, RebalanceInterval: -1, DrainRemoved: time.Millisecond,
		CheckInterval: 20 * time.Millisecond, Logger: log,
	})
	addr := serve(t, p)
	cl, _ := pinproxytest.Dial(t, addr, "c1")
	if err := p.SetUpstreams([]string{a.Addr}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "checks at A", func() bool { return a.Accepts.Load() >= 2 })
	if err := p.Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !cl.Closed() {
		t.Fatal("the drain did not move c1")
	}
	n := a.Accepts.Load()
	time.Sleep(200 * time.Millisecond) // ten check intervals before c1 redials
	if got := a.Accepts.Load() - n; got > 0 {
		t.Errorf("%d health checks at A while the drained client's redial was due", got)
	}
	if on := cl.Redial(); on != "A" {
		t.Fatalf("c1 redialled onto %s, want A", on)
	}
	n = a.Accepts.Load()
	testkit.WaitFor(t, "checks at A again", func() bool { return a.Accepts.Load() > n+1 })
}

// With refused-session detection off (RefusedWithin < 0), a moved
// client's redial still ends the wait for it: the health checks of the
// upstream it went to go on, not stopping for FailedBackoff.
func TestChecksGoOnAfterMoveWithoutSessionWatch(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1, RefusedWithin: -1,
		CheckInterval: 20 * time.Millisecond, Logger: log,
	})
	addr := serve(t, p)
	pinproxytest.Dial(t, addr, "c1")
	newer, _ := pinproxytest.Dial(t, addr, "c2")
	b.Start()
	testkit.WaitFor(t, "B up", func() bool { return stat(p, b.Addr).State == "up" })
	if err := p.Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !newer.Closed() {
		t.Fatal("the round did not move c2")
	}
	if on := newer.Redial(); on != "B" {
		t.Fatalf("c2 redialled onto %s, want B", on)
	}
	n := b.Accepts.Load()
	testkit.WaitForWithin(t, 5*time.Second, "checks at B after the redial", func() bool { return b.Accepts.Load() > n+2 })
}

// A round counts the redial its drain sent to an upstream as a
// connection already there, as it counts its own moves' redials: it
// neither test-connects that upstream while the redial is due nor moves
// a connection there that the redial evens out.
func TestRoundCountsDrainedRedial(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	r := pinproxytest.New(t, "R", pinproxytest.Line)
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams: []string{b.Addr, r.Addr}, RebalanceInterval: -1, DrainRemoved: time.Millisecond,
		Logger: log,
	})
	addr := serve(t, p)
	var on string
	for _, id := range []string{"c1", "c2", "c3"} {
		_, got := pinproxytest.Dial(t, addr, id)
		on += got
	}
	if on != "BRB" {
		t.Fatalf("the clients landed on %s, want BRB", on)
	}
	// R leaves, A comes: the drain moves c2 to A, and then B's two
	// against A's one (c2's redial) are even.
	if err := p.SetUpstreams([]string{a.Addr, b.Addr}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // DrainRemoved passes
	if err := p.Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, moves := a.Accepts.Load(), p.Totals().Moves; n != 1 || moves != 1 {
		t.Errorf("the round made %d connections to A (want 1, the drain's test-connect) and %d moves (want 1, the drain's)", n, moves)
	}
}

// A round that moves more than one connection sends each to the upstream
// its redial goes to, the first in least-used order counting the redials
// already on their way, and test-connects each of them first: two moves
// from a busy node to two idle ones go one to each, not both to the
// first. The health checks of both go on once the redials came.
func TestRoundMovesEachToWhereItsRedialGoes(t *testing.T) {
	a := pinproxytest.Down(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	c := pinproxytest.New(t, "C", pinproxytest.Line)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams: []string{a.Addr, b.Addr, c.Addr}, RebalanceInterval: -1, RebalanceMaxMoves: 2,
		CheckInterval: 20 * time.Millisecond, CheckRise: 1, Logger: log,
	})
	addr := serve(t, p)
	var cls []*pinproxytest.Client
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		cl, on := pinproxytest.Dial(t, addr, id)
		if on != "C" {
			t.Fatalf("%s landed on %s, want C", id, on)
		}
		cls = append(cls, cl)
	}
	a.Start()
	b.Start()
	testkit.WaitFor(t, "A and B up", func() bool {
		return stat(p, a.Addr).State == "up" && stat(p, b.Addr).State == "up"
	})
	if err := p.Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := p.Totals().Moves; got != 2 {
		t.Fatalf("%d moves, want 2", got)
	}
	for _, to := range []string{a.Addr, b.Addr} {
		if n := strings.Count(logs.String(), "moving a connection\" from="+c.Addr+" to="+to); n != 1 {
			t.Errorf("%d moves to %s, want 1", n, to)
		}
	}
	var on string
	for _, cl := range cls[2:] {
		if !cl.Closed() {
			t.Fatalf("%s was not moved", cl.ID)
		}
		on += cl.Redial()
	}
	if on != "AB" {
		t.Fatalf("the moved clients redialled onto %s, want AB", on)
	}
	na, nb := a.Accepts.Load(), b.Accepts.Load()
	testkit.WaitForWithin(t, 5*time.Second, "checks at A and B after the redials", func() bool {
		return a.Accepts.Load() > na+2 && b.Accepts.Load() > nb+2
	})
}

// A move whose client never redials (it went away) is forgotten once
// FailedBackoff has passed: a later client's session to that upstream is
// not taken for the moved connection's redial, so its refusal is not a
// failed move that stops the moves there, and the health checks, which
// leave the upstream out while a redial is due, go on.
func TestMoveWithoutRedialForgotten(t *testing.T) {
	var refuse atomic.Bool
	a := pinproxytest.New(t, "A", refuser(&refuse))
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1, Logger: log,
		FailedBackoff: 300 * time.Millisecond, RefusedWithin: 100 * time.Millisecond,
	})
	addr := serve(t, p)
	a.Stop() // both clients land on B
	pinproxytest.Dial(t, addr, "c0")
	pinproxytest.Dial(t, addr, "c1")
	a.Start()
	if err := p.Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := p.Totals().Moves; n != 1 {
		t.Fatalf("the round moved %d, want 1", n)
	}
	// c1 does not redial. Past FailedBackoff, A refuses a new client.
	time.Sleep(400 * time.Millisecond)
	refuse.Store(true)
	if _, on := session(t, addr, "c2"); on != "" {
		t.Fatalf("c2 answered by %s, want its session refused by A", on)
	}
	testkit.WaitFor(t, "A's refusal to count", func() bool { return stat(p, a.Addr).RefusedSessions == 1 })
	if n := p.Totals().FailedMoves; n != 0 || strings.Contains(logs.String(), "redial was refused") {
		t.Errorf("a new client's refused session counted as the move's redial: %d failed moves", n)
	}
}
