package pinproxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The pull request's first case: a node is down, so both connections land on the
// other node. A rebalance changes nothing while the node is down. Once it
// answers, exactly one connection (the newer) is closed, and the redial
// lands on the recovered node.
func TestSeedRebalanceMovesNewerConnectionOnceNodeAnswers(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{a.Addr, b.Addr},
		RebalanceInterval: -1, // rounds run by hand below
		Logger:            log,
	})
	addr := serve(t, p)
	ctx := context.Background()

	older, on := pinproxytest.Dial(t, addr, "older")
	if on != "A" {
		t.Fatalf("first client landed on %s, want A", on)
	}
	newer, on := pinproxytest.Dial(t, addr, "newer")
	if on != "A" {
		t.Fatalf("second client landed on %s while B is down, want A", on)
	}
	if got := stat(p, b.Addr); got.Failures != 1 || got.Answered {
		t.Fatalf("B after the failed dial: %+v, want 1 failure, not answered", got)
	}

	// B is still down: the round test-connects, fails, and closes nothing.
	if err := p.Rebalance(ctx); err != nil {
		t.Fatalf("Rebalance while B is down: %v", err)
	}
	for _, cl := range []*pinproxytest.Client{older, newer} {
		if on, err := cl.Ping(); err != nil || on != "A" {
			t.Fatalf("client %s after a round with B down: on %q, %v; want still on A", cl.ID, on, err)
		}
	}
	if got := stat(p, b.Addr); got.Failures != 2 {
		t.Fatalf("B after the round: %d failures, want 2 (the test-connect failed)", got.Failures)
	}
	if got := p.Totals().Moves; got != 0 {
		t.Fatalf("moves while B is down = %d, want 0", got)
	}

	// B answers again: the next round closes exactly the newer connection.
	b.Start()
	if err := p.Rebalance(ctx); err != nil {
		t.Fatalf("Rebalance once B answers: %v", err)
	}
	if !newer.Closed() {
		t.Fatal("the newer connection was not closed")
	}
	if on, err := older.Ping(); err != nil || on != "A" {
		t.Fatalf("older client after the move: on %q, %v; want still on A", on, err)
	}
	if got := p.Totals().Moves; got != 1 {
		t.Fatalf("moves = %d, want 1", got)
	}
	want := fmt.Sprintf(`level=INFO msg="answers again; moving a connection" from=%s to=%s`, a.Addr, b.Addr)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q", want)
	}

	// The client redials, and least-used order sends it to B.
	if on := newer.Redial(); on != "B" {
		t.Fatalf("redial landed on %s, want B", on)
	}
	if !b.SawID("newer") {
		t.Fatal("B never saw the newer client")
	}
	for _, s := range p.Stats() {
		if s.Live != 1 {
			t.Errorf("%s holds %d connections after the move, want 1", s.Addr, s.Live)
		}
	}

	// Now the spread is even: another round makes no connection.
	acceptsA, acceptsB := a.Accepts.Load(), b.Accepts.Load()
	if err := p.Rebalance(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Accepts.Load() != acceptsA || b.Accepts.Load() != acceptsB {
		t.Errorf("a round with an even spread connected: A %d→%d, B %d→%d accepts",
			acceptsA, a.Accepts.Load(), acceptsB, b.Accepts.Load())
	}
}

// The pull request's second case: with one connection per node, a rebalance leaves
// everything alone and makes no connection.
func TestSeedRebalanceLeavesEvenSpreadAlone(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1})
	addr := serve(t, p)

	c1, on1 := pinproxytest.Dial(t, addr, "c1")
	c2, on2 := pinproxytest.Dial(t, addr, "c2")
	if on1 != "A" || on2 != "B" {
		t.Fatalf("clients landed on %s and %s, want A then B", on1, on2)
	}
	acceptsA, acceptsB := a.Accepts.Load(), b.Accepts.Load()
	dialsA, dialsB := stat(p, a.Addr).Dials, stat(p, b.Addr).Dials

	for range 3 {
		if err := p.Rebalance(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if a.Accepts.Load() != acceptsA || b.Accepts.Load() != acceptsB {
		t.Errorf("rounds with one connection per node connected: A %d→%d, B %d→%d accepts",
			acceptsA, a.Accepts.Load(), acceptsB, b.Accepts.Load())
	}
	if stat(p, a.Addr).Dials != dialsA || stat(p, b.Addr).Dials != dialsB {
		t.Errorf("rounds with an even spread dialed")
	}
	for _, cl := range []*pinproxytest.Client{c1, c2} {
		if _, err := cl.Ping(); err != nil {
			t.Errorf("client %s after the rounds: %v", cl.ID, err)
		}
	}
	if got := p.Totals().Moves; got != 0 {
		t.Errorf("moves = %d, want 0", got)
	}
}

// The rounds run by themselves while the proxy serves.
func TestRebalanceRunsOnInterval(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{a.Addr, b.Addr},
		RebalanceInterval: 20 * time.Millisecond,
		FailedBackoff:     time.Hour, // only a test-connect that answers lifts it
	})
	addr := serve(t, p)
	pinproxytest.Dial(t, addr, "older")
	newer, on := pinproxytest.Dial(t, addr, "newer")
	if on != "A" {
		t.Fatalf("second client on %s, want A", on)
	}
	b.Start()
	if !newer.Closed() {
		t.Fatal("no round moved the newer connection")
	}
	if on := newer.Redial(); on != "B" {
		t.Fatalf("redial landed on %s, want B", on)
	}
}

// Clients spread least-used first, ties to the upstream listed first.
func TestLeastUsedOrder(t *testing.T) {
	nodes := []*pinproxytest.Node{pinproxytest.New(t, "A", pinproxytest.Line), pinproxytest.New(t, "B", pinproxytest.Line), pinproxytest.New(t, "C", pinproxytest.Line)}
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr},
		RebalanceInterval: -1,
	})
	addr := serve(t, p)
	var got []string
	clients := map[string]*pinproxytest.Client{}
	for i := range 6 {
		cl, on := pinproxytest.Dial(t, addr, fmt.Sprint(i))
		clients[fmt.Sprint(i)] = cl
		got = append(got, on)
	}
	if want := "A B C A B C"; strings.Join(got, " ") != want {
		t.Fatalf("clients landed on %v, want %s", got, want)
	}
	// Close B's two clients: the next two go to B.
	clients["1"].Conn.Close()
	clients["4"].Conn.Close()
	testkit.WaitFor(t, "the second node's connections to close", func() bool { return stat(p, nodes[1].Addr).Live == 0 })
	got = got[:0]
	for i := 6; i < 9; i++ {
		_, on := pinproxytest.Dial(t, addr, fmt.Sprint(i))
		got = append(got, on)
	}
	if want := "B B A"; strings.Join(got, " ") != want {
		t.Fatalf("after B's clients left, new clients landed on %v, want %s", got, want)
	}
}
