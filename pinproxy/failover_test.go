package pinproxy_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// A refused dial moves on to the next upstream; the refusing upstream is
// then tried last, but still tried when everything else fails.
func TestFailoverWhenUpstreamRefuses(t *testing.T) {
	a := pinproxytest.Down(t, "A", pinproxytest.Line)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{a.Addr, b.Addr},
		RebalanceInterval: -1,
		FailedBackoff:     time.Hour,
		Logger:            log,
	})
	addr := serve(t, p)

	c1, on := pinproxytest.Dial(t, addr, "c1")
	if on != "B" {
		t.Fatalf("c1 landed on %s, want B (A refuses)", on)
	}
	sa := stat(p, a.Addr)
	if sa.Dials != 1 || sa.Failures != 1 || sa.Answered || sa.LastFailure.IsZero() ||
		!strings.Contains(sa.LastError, "refused") {
		t.Fatalf("A after a refused dial: %+v", sa)
	}

	// A just failed, so it comes after B although B is busier.
	c2, on := pinproxytest.Dial(t, addr, "c2")
	if on != "B" {
		t.Fatalf("c2 landed on %s, want B", on)
	}
	if got := stat(p, a.Addr).Dials; got != 1 {
		t.Fatalf("A was dialed again within its back-off (%d dials)", got)
	}

	// B goes down and A comes back: A is still in back-off, but it is
	// tried once B refuses.
	b.Stop()
	for _, cl := range []*pinproxytest.Client{c1, c2} {
		if !cl.Closed() { // the upstream's end reaches the client
			t.Fatalf("client %s not closed when B went down", cl.ID)
		}
		cl.Conn.Close()
	}
	testkit.WaitFor(t, "B's connections to close", func() bool { return stat(p, b.Addr).Live == 0 })
	a.Start()
	if _, on := pinproxytest.Dial(t, addr, "c3"); on != "A" {
		t.Fatalf("c3 landed on %s, want A", on)
	}
	if sa, sb := stat(p, a.Addr), stat(p, b.Addr); !sa.Answered || sb.Answered || sb.Failures != 1 {
		t.Fatalf("after the second failover: A %+v, B %+v", sa, sb)
	}
}

// The back-off ends by itself, on the proxy's clock.
func TestFailedBackoffEnds(t *testing.T) {
	a := pinproxytest.Down(t, "A", pinproxytest.Line)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	var clock fakeClock
	cfg := pinproxy.Config{Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1}
	pinproxy.SetClockForTest(&cfg, clock.now)
	p := newProxy(t, cfg)
	addr := serve(t, p)
	if _, on := pinproxytest.Dial(t, addr, "c1"); on != "B" {
		t.Fatalf("c1 landed on %s, want B", on)
	}
	a.Start()
	clock.advance(pinproxy.DefaultFailedBackoff - time.Second)
	if _, on := pinproxytest.Dial(t, addr, "c1b"); on != "B" {
		t.Fatalf("c1b landed on %s during A's back-off, want B", on)
	}
	clock.advance(time.Second) // the 30 s back-off is over
	if _, on := pinproxytest.Dial(t, addr, "c2"); on != "A" {
		t.Fatalf("c2 landed on %s, want A once its back-off ended", on)
	}
}

// When no upstream answers, the client is closed.
func TestAllUpstreamsFailClosesClient(t *testing.T) {
	a := pinproxytest.Down(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1, Logger: log})
	addr := serve(t, p)

	if !pinproxytest.ClosedConn(mustDial(t, addr)) {
		t.Fatal("client was not closed although no upstream answers")
	}
	if got := p.Totals().Unrouted; got != 1 {
		t.Errorf("Unrouted = %d, want 1", got)
	}
	for _, s := range p.Stats() {
		if s.Failures != 1 || s.Live != 0 {
			t.Errorf("%s: %+v, want 1 failure, 0 live", s.Addr, s)
		}
	}
	if !strings.Contains(logs.String(), `msg="no upstream answers; closing the client"`) {
		t.Error("the decision to close the client was not logged")
	}
}

// Upstreams are given by name and resolved at each dial: the dialer gets
// the host:port as listed, every time.
func TestUpstreamResolvedAtEachDial(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	_, port, _ := net.SplitHostPort(a.Addr)
	byName := net.JoinHostPort("localhost", port)
	var mu sync.Mutex
	var dialed []string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, network+" "+addr)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	p := newProxy(t, pinproxy.Config{Upstreams: []string{byName}, RebalanceInterval: -1, DialContext: dial})
	addr := serve(t, p)
	for _, id := range []string{"c1", "c2"} {
		if _, on := pinproxytest.Dial(t, addr, id); on != "A" {
			t.Fatalf("%s landed on %q", id, on)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "tcp " + byName; len(dialed) != 2 || dialed[0] != want || dialed[1] != want {
		t.Fatalf("dialed %q, want %q twice", dialed, want)
	}
}

// With many upstreams that refuse, a client costs MaxDialAttempts dials
// (3 by default), not one per upstream, and the warnings about them are
// rate-limited: a burst of clients logs a few lines, not one a dial.
//
// The count is per client the proxy accepted, not per client this test
// dialed: the proxy listens on a port the kernel hands out, and a test
// elsewhere that dials a port it once listened on, to find it refused,
// reaches the proxy when the proxy got that port, and costs it dials too.
func TestDialAttemptsBounded(t *testing.T) {
	var ups []string
	for range 50 { // each down node holds its port: no two share one, and no one else takes it
		ups = append(ups, pinproxytest.Down(t, "X", pinproxytest.Line).Addr)
	}
	for _, tc := range []struct {
		max, want int
	}{{0, pinproxy.DefaultMaxDialAttempts}, {5, 5}, {-1, 50}} {
		t.Run(fmt.Sprint(tc.max), func(t *testing.T) {
			log, logs := testLogger(t)
			p := newProxy(t, pinproxy.Config{Upstreams: ups, RebalanceInterval: -1, FailedBackoff: -1, MaxDialAttempts: tc.max, Logger: log})
			addr := serve(t, p)
			const clients = 20
			for range clients {
				if !pinproxytest.ClosedConn(mustDial(t, addr)) {
					t.Fatal("client was not closed although no upstream answers")
				}
			}
			tot, dials := allUnrouted(t, p)
			if tot.Accepted > clients {
				t.Logf("%d clients accepted, %d of them from elsewhere", tot.Accepted, tot.Accepted-clients)
			}
			if dials != tot.Accepted*int64(tc.want) {
				t.Errorf("%d clients cost %d dials, want %d each", tot.Accepted, dials, tc.want)
			}
			// At most one line a second of each kind; the test takes a
			// few seconds at most on a loaded machine.
			if n := strings.Count(logs.String(), "trying the next"); n < 1 || n > 10 {
				t.Errorf("%d dial warnings for %d failed dials, want a few", n, dials)
			}
			if n := strings.Count(logs.String(), "no upstream answers"); n < 1 || n > 10 {
				t.Errorf("%d lines for %d clients closed, want a few", n, clients)
			}
		})
	}
}

// allUnrouted waits until p has closed every client it accepted for want
// of an upstream and handles none, and returns its totals with the dials
// its upstreams counted, read so that no client came in between: every
// dial counted is one of those clients'.
func allUnrouted(t *testing.T, p *pinproxy.Proxy) (pinproxy.Totals, int64) {
	t.Helper()
	var tot pinproxy.Totals
	var dials int64
	testkit.WaitFor(t, "every client accepted to be closed unrouted", func() bool {
		tot, dials = p.Totals(), 0
		for _, s := range p.Stats() {
			dials += s.Dials
		}
		return tot.Live == 0 && tot.Unrouted == tot.Accepted && p.Totals() == tot
	})
	return tot, dials
}
