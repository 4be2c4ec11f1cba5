package pinproxy_test

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// With two idle nodes of which one is still down, the rounds take turns
// between them, so the down node does not block the move to the one that
// answers; and the redial lands where the round tested.
func TestRebalanceTakesTurnsAmongIdleNodes(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	c := pinproxytest.Down(t, "C", pinproxytest.Line)
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{b.Addr, c.Addr, a.Addr},
		RebalanceInterval: -1,
		Logger:            log,
	})
	addr := serve(t, p)
	pinproxytest.Dial(t, addr, "c1") // B and C refuse: A
	newer, on := pinproxytest.Dial(t, addr, "c2")
	if on != "A" {
		t.Fatalf("c2 landed on %s, want A", on)
	}
	c.Start()

	// Round 1 tests B, which failed longer ago than C (B was dialed first).
	if err := p.Rebalance(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := p.Totals().Moves; got != 0 {
		t.Fatalf("round 1 moved %d connections with B down", got)
	}
	if c.Accepts.Load() != 0 {
		t.Fatal("round 1 tested C; want B, whose failure was older")
	}
	// Round 2 tests C, which answers: the newer connection moves there.
	if err := p.Rebalance(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !newer.Closed() {
		t.Fatal("round 2 did not move the newer connection")
	}
	if on := newer.Redial(); on != "C" {
		t.Fatalf("redial landed on %s, want C", on)
	}
}

// Three against one is a spread of two: one round moves one connection,
// and then two against two is even.
func TestRebalanceSpreadOfTwo(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{a.Addr, b.Addr},
		RebalanceInterval: -1,
		FailedBackoff:     -1, // off: B is tried in plain least-used order
	})
	addr := serve(t, p)
	var onA []*pinproxytest.Client
	for _, id := range []string{"c1", "c2", "c3"} {
		cl, on := pinproxytest.Dial(t, addr, id)
		if on != "A" {
			t.Fatalf("%s landed on %s while B is down", id, on)
		}
		onA = append(onA, cl)
	}
	b.Start()
	if _, on := pinproxytest.Dial(t, addr, "c4"); on != "B" {
		t.Fatalf("c4 landed on %s, want B", on)
	}
	if err := p.Rebalance(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !onA[2].Closed() {
		t.Fatal("the newest of A's three connections was not moved")
	}
	if on := onA[2].Redial(); on != "B" {
		t.Fatalf("redial landed on %s, want B", on)
	}
	accepts := b.Accepts.Load() + a.Accepts.Load()
	if err := p.Rebalance(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := b.Accepts.Load() + a.Accepts.Load(); got != accepts || p.Totals().Moves != 1 {
		t.Fatalf("a round on two against two connected or moved (%d accepts → %d, %d moves)", accepts, got, p.Totals().Moves)
	}
}

// A moved connection's log line says it was rebalanced, with its bytes.
func TestRebalanceLogsReason(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1, Logger: log, LogConnections: true})
	addr := serve(t, p)
	pinproxytest.Dial(t, addr, "older")
	newer, _ := pinproxytest.Dial(t, addr, "newer")
	b.Start()
	if err := p.Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !newer.Closed() {
		t.Fatal("the newer connection was not moved")
	}
	testkit.WaitFor(t, "the moved connection's line", func() bool {
		return strings.Contains(logs.String(), "bytes_sent=14 bytes_received=7 reason=rebalanced")
	})
}

// "answers again" is said only of an upstream that was down; a move to
// one that never was (added by a reload) says the spread was uneven.
func TestRebalanceSaysWhyItMoves(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr}, RebalanceInterval: -1, Logger: log})
	addr := serve(t, p)
	pinproxytest.Dial(t, addr, "older")
	newer, _ := pinproxytest.Dial(t, addr, "newer")
	if err := p.SetUpstreams([]string{a.Addr, b.Addr}); err != nil {
		t.Fatal(err)
	}
	if err := p.Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !newer.Closed() {
		t.Fatal("the newer connection was not moved")
	}
	if got := logs.String(); strings.Contains(got, "answers again") || !strings.Contains(got, `msg="spread uneven; moving a connection"`) {
		t.Errorf("a move to an upstream that was never down: want \"spread uneven\", not \"answers again\"; log:\n%s", got)
	}
}

// With health checks, an upstream the checks marked down and then up again
// "answers again" when a round moves a connection to it, though the checks
// said up before the round ran.
func TestRebalanceAnswersAgainAfterChecks(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1, Logger: log,
		CheckInterval: 20 * time.Millisecond, CheckRise: 1, CheckFall: 1})
	addr := serve(t, p)
	testkit.WaitFor(t, "B marked down", func() bool { return stat(p, b.Addr).State == "down" })
	pinproxytest.Dial(t, addr, "older")
	newer, _ := pinproxytest.Dial(t, addr, "newer")
	b.Start()
	testkit.WaitFor(t, "B marked up", func() bool { return stat(p, b.Addr).State == "up" })
	if err := p.Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !newer.Closed() {
		t.Fatal("the newer connection was not moved")
	}
	if got := logs.String(); !strings.Contains(got, `msg="answers again; moving a connection"`) {
		t.Errorf("a move to an upstream back from down: want \"answers again\"; log:\n%s", got)
	}
}

// A connection's log line says which side closed first.
func TestConnectionLogSaysWhoClosed(t *testing.T) {
	for _, tc := range []struct {
		name       string
		upCloses   bool
		wantReason string
	}{
		{"client", false, `reason="client closed"`},
		{"upstream", true, `reason="upstream closed"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					if tc.upCloses {
						c.Write([]byte("bye\n"))
						c.Close()
						continue
					}
					go func() { io.Copy(io.Discard, c); c.Close() }()
				}
			}()
			log, logs := testLogger(t)
			p := newProxy(t, pinproxy.Config{Upstreams: []string{ln.Addr().String()}, RebalanceInterval: -1, Logger: log, LogConnections: true})
			addr := serve(t, p)
			c := mustDial(t, addr)
			if tc.upCloses {
				io.Copy(io.Discard, c)
			} else {
				c.Write([]byte("hello\n"))
				time.Sleep(50 * time.Millisecond)
			}
			c.Close()
			testkit.WaitFor(t, "the connection's line with "+tc.wantReason, func() bool {
				return strings.Contains(logs.String(), tc.wantReason)
			})
		})
	}
}
