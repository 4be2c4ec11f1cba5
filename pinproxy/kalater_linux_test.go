package pinproxy

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// keepAliveOn reads c's SO_KEEPALIVE and TCP_KEEPIDLE.
func keepAliveOn(t *testing.T, c net.Conn) (on, idle int) {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		on, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		if serr == nil {
			idle, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return on, idle
}

// heldLink starts a proxy to lab, relaying with goroutines (the parker
// sets the keepalive of their upstreams; the event loops do it for
// theirs, see TestKeepAliveBothSides), with the parker's sweeps held off
// (holdSweeps), dials one echoing connection through it, and returns the
// proxy and the connection's link.
func heldLink(t *testing.T, lab *flightLab) (*Proxy, *link) {
	t.Helper()
	p := newGoroutineTestProxy(t, lab.ln.Addr().String())
	holdSweeps(p)
	ln, err := p.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	c.Write([]byte("E"))
	var l *link
	waitFor(t, "the connection to start", func() bool {
		p.park.mu.Lock()
		defer p.park.mu.Unlock()
		l = p.park.head
		return l != nil
	})
	return p, l
}

// holdSweeps keeps the parker from sweeping until the test sweeps.
func holdSweeps(p *Proxy) {
	p.park.mu.Lock()
	p.park.timer.Stop()
	p.park.armed = true
	p.park.mu.Unlock()
}

// The proxy's own dialer sets no keepalive: the parker's first sweep
// after the dial does, so a connection that ends before it costs no
// setsockopt.
func TestKeepAliveSetBySweep(t *testing.T) {
	p, l := heldLink(t, newFlightLab(t))
	uc := l.upstream
	if on, _ := keepAliveOn(t, uc); on != 0 || !l.kaPending.Load() {
		t.Fatalf("before a sweep: upstream keepalive on=%d, pending %v; want off and pending", on, l.kaPending.Load())
	}
	p.park.sweepNow()
	want := int(DefaultKeepAlive.Seconds())
	if on, idle := keepAliveOn(t, uc); on == 0 || idle != want || l.kaPending.Load() {
		t.Fatalf("after a sweep: upstream keepalive on=%d idle=%ds, pending %v; want on, %ds, not pending", on, idle, l.kaPending.Load(), want)
	}
}

// A connection handed to a new process has the new process's keepalive on
// both sides: on the upstream even when no sweep of the old process had
// set it yet, and on both the configured idle time, not the 15 s
// net.FileConn sets.
func TestHandoffKeepAlive(t *testing.T) {
	lab := newFlightLab(t)
	oldP, l := heldLink(t, lab)
	if !l.kaPending.Load() {
		t.Fatal("the upstream's keepalive is not pending before the hand-over")
	}

	newP := newGoroutineTestProxy(t, lab.ln.Addr().String())
	if res := handOver(t, oldP, newP); !res.Committed || res.Conns != 1 {
		t.Fatalf("Handoff: %+v; want committed, 1 connection", res)
	}
	var moved [2]net.Conn
	newP.mu.Lock()
	if h := newP.upstreams[0].head; h != nil {
		moved = [2]net.Conn{h.client, h.upstream}
	}
	newP.mu.Unlock()
	if moved[0] == nil {
		t.Fatal("the new proxy holds no connection")
	}
	want := int(DefaultKeepAlive.Seconds())
	for i, side := range []string{"client", "upstream"} {
		if on, idle := keepAliveOn(t, moved[i]); on == 0 || idle != want {
			t.Errorf("the moved %s's keepalive: on=%d idle=%ds, want on, %ds", side, on, idle, want)
		}
	}
}
