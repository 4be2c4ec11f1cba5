package pinproxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/proofkit/nodekit/pinproxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The seed's first case: a node is down, so both connections land on the
// other node. A rebalance changes nothing while the node is down. Once it
// answers, exactly one connection (the newer) is closed, and the redial
// lands on the recovered node.
func TestSeedRebalanceMovesNewerConnectionOnceNodeAnswers(t *testing.T) {
	a := newNode(t, "A", lineNode)
	b := downNode(t, "B", lineNode)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{a.addr, b.addr},
		RebalanceInterval: -1, // rounds run by hand below
		Logger:            log,
	})
	addr := serve(t, p)
	ctx := context.Background()

	older, on := dialClient(t, addr, "older")
	if on != "A" {
		t.Fatalf("first client landed on %s, want A", on)
	}
	newer, on := dialClient(t, addr, "newer")
	if on != "A" {
		t.Fatalf("second client landed on %s while B is down, want A", on)
	}
	if got := stat(p, b.addr); got.Failures != 1 || got.Answered {
		t.Fatalf("B after the failed dial: %+v, want 1 failure, not answered", got)
	}

	// B is still down: the round test-connects, fails, and closes nothing.
	if err := p.Rebalance(ctx); err != nil {
		t.Fatalf("Rebalance while B is down: %v", err)
	}
	for _, cl := range []*client{older, newer} {
		if on, err := cl.ping(); err != nil || on != "A" {
			t.Fatalf("client %s after a round with B down: on %q, %v; want still on A", cl.id, on, err)
		}
	}
	if got := stat(p, b.addr); got.Failures != 2 {
		t.Fatalf("B after the round: %d failures, want 2 (the test-connect failed)", got.Failures)
	}
	if got := p.Totals().Moves; got != 0 {
		t.Fatalf("moves while B is down = %d, want 0", got)
	}

	// B answers again: the next round closes exactly the newer connection.
	b.start()
	if err := p.Rebalance(ctx); err != nil {
		t.Fatalf("Rebalance once B answers: %v", err)
	}
	if !newer.closed() {
		t.Fatal("the newer connection was not closed")
	}
	if on, err := older.ping(); err != nil || on != "A" {
		t.Fatalf("older client after the move: on %q, %v; want still on A", on, err)
	}
	if got := p.Totals().Moves; got != 1 {
		t.Fatalf("moves = %d, want 1", got)
	}
	want := fmt.Sprintf(`level=INFO msg="answers again; moving a connection" from=%s to=%s`, a.addr, b.addr)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q", want)
	}

	// The client redials, and least-used order sends it to B.
	if on := newer.redial(); on != "B" {
		t.Fatalf("redial landed on %s, want B", on)
	}
	if !b.sawID("newer") {
		t.Fatal("B never saw the newer client")
	}
	for _, s := range p.Stats() {
		if s.Live != 1 {
			t.Errorf("%s holds %d connections after the move, want 1", s.Addr, s.Live)
		}
	}

	// Now the spread is even: another round makes no connection.
	acceptsA, acceptsB := a.accepts.Load(), b.accepts.Load()
	if err := p.Rebalance(ctx); err != nil {
		t.Fatal(err)
	}
	if a.accepts.Load() != acceptsA || b.accepts.Load() != acceptsB {
		t.Errorf("a round with an even spread connected: A %d→%d, B %d→%d accepts",
			acceptsA, a.accepts.Load(), acceptsB, b.accepts.Load())
	}
}

// The seed's second case: with one connection per node, a rebalance leaves
// everything alone and makes no connection.
func TestSeedRebalanceLeavesEvenSpreadAlone(t *testing.T) {
	a := newNode(t, "A", lineNode)
	b := newNode(t, "B", lineNode)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.addr, b.addr}, RebalanceInterval: -1})
	addr := serve(t, p)

	c1, on1 := dialClient(t, addr, "c1")
	c2, on2 := dialClient(t, addr, "c2")
	if on1 != "A" || on2 != "B" {
		t.Fatalf("clients landed on %s and %s, want A then B", on1, on2)
	}
	acceptsA, acceptsB := a.accepts.Load(), b.accepts.Load()
	dialsA, dialsB := stat(p, a.addr).Dials, stat(p, b.addr).Dials

	for range 3 {
		if err := p.Rebalance(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if a.accepts.Load() != acceptsA || b.accepts.Load() != acceptsB {
		t.Errorf("rounds with one connection per node connected: A %d→%d, B %d→%d accepts",
			acceptsA, a.accepts.Load(), acceptsB, b.accepts.Load())
	}
	if stat(p, a.addr).Dials != dialsA || stat(p, b.addr).Dials != dialsB {
		t.Errorf("rounds with an even spread dialed")
	}
	for _, cl := range []*client{c1, c2} {
		if _, err := cl.ping(); err != nil {
			t.Errorf("client %s after the rounds: %v", cl.id, err)
		}
	}
	if got := p.Totals().Moves; got != 0 {
		t.Errorf("moves = %d, want 0", got)
	}
}

// The rounds run by themselves while the proxy serves.
func TestRebalanceRunsOnInterval(t *testing.T) {
	a := newNode(t, "A", lineNode)
	b := downNode(t, "B", lineNode)
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{a.addr, b.addr},
		RebalanceInterval: 20 * time.Millisecond,
		FailedBackoff:     time.Hour, // only a test-connect that answers lifts it
	})
	addr := serve(t, p)
	dialClient(t, addr, "older")
	newer, on := dialClient(t, addr, "newer")
	if on != "A" {
		t.Fatalf("second client on %s, want A", on)
	}
	b.start()
	if !newer.closed() {
		t.Fatal("no round moved the newer connection")
	}
	if on := newer.redial(); on != "B" {
		t.Fatalf("redial landed on %s, want B", on)
	}
}

// Clients spread least-used first, ties to the upstream listed first.
func TestLeastUsedOrder(t *testing.T) {
	nodes := []*node{newNode(t, "A", lineNode), newNode(t, "B", lineNode), newNode(t, "C", lineNode)}
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{nodes[0].addr, nodes[1].addr, nodes[2].addr},
		RebalanceInterval: -1,
	})
	addr := serve(t, p)
	var got []string
	clients := map[string]*client{}
	for i := range 6 {
		cl, on := dialClient(t, addr, fmt.Sprint(i))
		clients[fmt.Sprint(i)] = cl
		got = append(got, on)
	}
	if want := "A B C A B C"; strings.Join(got, " ") != want {
		t.Fatalf("clients landed on %v, want %s", got, want)
	}
	// Close B's two clients: the next two go to B.
	clients["1"].c.Close()
	clients["4"].c.Close()
	waitUntil(t, func() bool { return stat(p, nodes[1].addr).Live == 0 })
	got = got[:0]
	for i := 6; i < 9; i++ {
		_, on := dialClient(t, addr, fmt.Sprint(i))
		got = append(got, on)
	}
	if want := "B B A"; strings.Join(got, " ") != want {
		t.Fatalf("after B's clients left, new clients landed on %v, want %s", got, want)
	}
}

// waitUntil polls cond; it fails the test if cond is still false after waitFor.
func waitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
