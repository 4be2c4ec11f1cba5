package pinproxy_test

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// recordingListener keeps the conns it accepts, unwrapped.
type recordingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func keepAliveOf(t *testing.T, c net.Conn) (on, idle int) {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	rc.Control(func(fd uintptr) {
		on, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		if serr == nil {
			idle, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
		}
	})
	if serr != nil {
		t.Fatal(serr)
	}
	return on, idle
}

// TCP keepalive is on, with the configured idle time, on both sides.
func TestKeepAliveBothSides(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	var mu sync.Mutex
	var ups []net.Conn
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer // its own keepalive default is 15 s: the proxy must set 30 s
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			ups = append(ups, c)
			mu.Unlock()
		}
		return c, err
	}
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr}, RebalanceInterval: -1, DialContext: dial})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &recordingListener{Listener: inner}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		p.Shutdown(context.Background())
		<-done
	})
	cl, _ := pinproxytest.Dial(t, inner.Addr().String(), "c")
	defer cl.Conn.Close()

	ln.mu.Lock()
	client := ln.conns[0]
	ln.mu.Unlock()
	mu.Lock()
	upstream := ups[0]
	mu.Unlock()
	want := int(pinproxy.DefaultKeepAlive.Seconds())
	for side, c := range map[string]net.Conn{"client": client, "upstream": upstream} {
		if on, idle := keepAliveOf(t, c); on == 0 || idle != want {
			t.Errorf("%s side: keepalive on=%d idle=%ds, want on, %ds", side, on, idle, want)
		}
	}
}
