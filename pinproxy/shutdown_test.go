package pinproxy_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// Shutdown stops accepting, lets live connections finish, and returns once
// they have.
func TestShutdownDrains(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr}})
	ln, served := listenAndServe(t, p)
	cl, _ := pinproxytest.Dial(t, ln.Addr().String(), "c")

	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(context.Background()) }()
	if err := <-served; !errors.Is(err, pinproxy.ErrProxyClosed) {
		t.Fatalf("Serve returned %v, want ErrProxyClosed", err)
	}
	// Not accepting any more, but the live connection still works.
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), pinproxytest.WaitFor); err == nil {
		c.Close()
		t.Error("the proxy still accepts after Shutdown")
	}
	if _, err := cl.Ping(); err != nil {
		t.Fatalf("live connection during the drain: %v", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v while a connection was live", err)
	default:
	}
	cl.Conn.Close()
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown after the drain: %v", err)
	}
	if err := p.Serve(ln); !errors.Is(err, pinproxy.ErrProxyClosed) {
		t.Errorf("Serve after Shutdown = %v", err)
	}
	if err := p.Rebalance(context.Background()); !errors.Is(err, pinproxy.ErrProxyClosed) {
		t.Errorf("Rebalance after Shutdown = %v", err)
	}
}

// When ctx ends first, Shutdown closes what is left and says so.
func TestShutdownForcesWhenContextEnds(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr}})
	ln, served := listenAndServe(t, p)
	cl, _ := pinproxytest.Dial(t, ln.Addr().String(), "c")

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want context.DeadlineExceeded", err)
	}
	if !cl.Closed() {
		t.Fatal("the live connection was not closed")
	}
	if err := <-served; !errors.Is(err, pinproxy.ErrProxyClosed) {
		t.Fatalf("Serve = %v", err)
	}
	if got := p.Totals().Live; got != 0 {
		t.Errorf("%d connections live after a forced Shutdown", got)
	}
}

// Serve may run on several listeners; Shutdown stops them all.
func TestServeSeveralListeners(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr}})
	addr1, addr2 := serve(t, p), serve(t, p)
	pinproxytest.Dial(t, addr1, "c1")
	pinproxytest.Dial(t, addr2, "c2")
	if got := p.Stats()[0].Live; got != 2 {
		t.Fatalf("live = %d, want 2", got)
	}
}

// A listener its owner closes, not Shutdown, ends Serve with an error that
// is not ErrProxyClosed; the connections through it and the proxy's other
// listeners go on.
func TestServeEndsWhenItsListenerIsClosed(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr}, RebalanceInterval: -1})
	other := serve(t, p)
	ln, served := listenAndServe(t, p)
	c1, _ := pinproxytest.Dial(t, ln.Addr().String(), "c1")
	ln.Close()
	select {
	case err := <-served:
		if err == nil || errors.Is(err, pinproxy.ErrProxyClosed) {
			t.Fatalf("Serve returned %v, want the closed listener's error", err)
		}
	case <-time.After(pinproxytest.WaitFor):
		t.Fatal("Serve did not return after its listener was closed")
	}
	pinproxytest.Dial(t, other, "c2")
	if got := p.Stats()[0].Live; got != 2 {
		t.Fatalf("live = %d, want 2 (c1 through the closed listener, c2 through the other)", got)
	}
	c1.Conn.Close()
}

// Over MaxConns, a new client is closed at once; once one leaves, the next
// gets through.
func TestMaxConns(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr}, MaxConns: 1, RebalanceInterval: -1})
	addr := serve(t, p)
	first, _ := pinproxytest.Dial(t, addr, "first")
	if !pinproxytest.ClosedConn(mustDial(t, addr)) {
		t.Fatal("a client over MaxConns was not closed")
	}
	if tot := p.Totals(); tot.Rejected != 1 || tot.Accepted != 2 {
		t.Fatalf("totals %+v, want 1 rejected of 2 accepted", tot)
	}
	if _, err := first.Ping(); err != nil {
		t.Fatalf("first client: %v", err)
	}
	first.Conn.Close()
	testkit.WaitFor(t, "the live connections to end", func() bool { return p.Totals().Live == 0 })
	if _, on := pinproxytest.Dial(t, addr, "next"); on != "A" {
		t.Fatalf("next client on %q", on)
	}
}
