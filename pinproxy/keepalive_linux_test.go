package pinproxy_test

import (
	"context"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// keepAliveOf reads c's SO_KEEPALIVE, TCP_KEEPIDLE and TCP_KEEPINTVL.
func keepAliveOf(t *testing.T, c net.Conn) (on, idle, intvl int) {
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
		if serr == nil {
			intvl, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL)
		}
	})
	if serr != nil {
		t.Fatal(serr)
	}
	return on, idle, intvl
}

// userTimeoutOf reads c's TCP_USER_TIMEOUT, in milliseconds.
func userTimeoutOf(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ms int
	var serr error
	rc.Control(func(fd uintptr) {
		ms, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	})
	if serr != nil {
		t.Fatal(serr)
	}
	return ms
}

// A conn accepted from a listener made by Listen has keepalive as
// configured (Serve leaves it as it comes), or none when it is turned off;
// and Serve proxies through such a listener.
func TestListenKeepAlive(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Echo)
	for _, tc := range []struct {
		name      string
		keepAlive time.Duration
		on        bool
		secs      int
	}{
		{"default", 0, true, int(pinproxy.DefaultKeepAlive.Seconds())},
		{"7s", 7 * time.Second, true, 7},
		{"1500ms rounds up", 1500 * time.Millisecond, true, 2},
		{"off", -1, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr}, RebalanceInterval: -1, KeepAlive: tc.keepAlive})
			ln, err := p.Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			c := mustDial(t, ln.Addr().String())
			sc, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Close()
			c.Close()
			on, idle, intvl := keepAliveOf(t, sc)
			if (on != 0) != tc.on || (tc.on && (idle != tc.secs || intvl != tc.secs)) {
				t.Errorf("accepted conn: keepalive on=%d idle=%ds interval=%ds, want on=%v, %ds", on, idle, intvl, tc.on, tc.secs)
			}
			if ut, want := userTimeoutOf(t, sc), 10*tc.secs*1000; ut != want {
				t.Errorf("accepted conn: TCP_USER_TIMEOUT %d ms, want %d (idle + 9 intervals)", ut, want)
			}

			// Through Serve, end to end.
			served := serveOn(p, ln)
			cl := mustDial(t, ln.Addr().String())
			if _, err := cl.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 1)
			if _, err := io.ReadFull(cl, b); err != nil || b[0] != 'x' {
				t.Fatalf("echo through Listen + Serve: %q, %v", b, err)
			}
			cl.Close()
			shutdown(t, p, served)
		})
	}
}

// Listen refuses a network that is not TCP.
func TestListenNotTCP(t *testing.T) {
	p := newProxy(t, pinproxy.Config{Upstreams: []string{"127.0.0.1:1"}})
	if ln, err := p.Listen(context.Background(), "udp", "127.0.0.1:0"); err == nil {
		ln.Close()
		t.Fatal("Listen udp: no error")
	}
}

// TCP keepalive is on, with the configured idle time, on both sides: the
// client's at once, the upstream's within a sweep of the parker (a
// second).
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
	served := serveOn(p, ln)
	t.Cleanup(func() {
		p.Shutdown(context.Background())
		<-served
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
	for deadline := time.Now().Add(pinproxytest.WaitFor); ; time.Sleep(10 * time.Millisecond) {
		if _, idle, _ := keepAliveOf(t, upstream); idle == want || time.Now().After(deadline) {
			break
		}
	}
	for side, c := range map[string]net.Conn{"client": client, "upstream": upstream} {
		if on, idle, _ := keepAliveOf(t, c); on == 0 || idle != want {
			t.Errorf("%s side: keepalive on=%d idle=%ds, want on, %ds", side, on, idle, want)
		}
		if ut := userTimeoutOf(t, c); ut != 10*want*1000 {
			t.Errorf("%s side: TCP_USER_TIMEOUT %d ms, want %d", side, ut, 10*want*1000)
		}
	}
}
