package pinproxy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// synSent counts this process's sockets in SYN_SENT to addr, from
// /proc/net/tcp (state 02; the remote address is hex, port big-endian).
func synSent(t *testing.T, addr string) int {
	t.Helper()
	ap, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	ip := ap.IP.To4()
	want := strings.ToUpper(strings.Join([]string{
		hexByte(ip[3]) + hexByte(ip[2]) + hexByte(ip[1]) + hexByte(ip[0]),
		hexByte(byte(ap.Port>>8)) + hexByte(byte(ap.Port)),
	}, ":"))
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[2] == want && f[3] == "02" {
			n++
		}
	}
	return n
}

func hexByte(b byte) string {
	return string("0123456789ABCDEF"[b>>4]) + string("0123456789ABCDEF"[b&15])
}

// A client's dial is bounded by DialTimeout: it ends at the timeout, with
// a timeout error, and leaves no socket connecting.
func TestDialTimeoutAbortsTheConnect(t *testing.T) {
	hole := blackHole(t)
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{hole},
		DialTimeout:       300 * time.Millisecond,
		RebalanceInterval: -1,
		Logger:            log,
	})
	addr := serve(t, p)
	c := mustDial(t, addr)
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
	if _, err := c.Read(make([]byte, 1)); err == nil || pinproxytest.IsTimeout(err) {
		t.Fatalf("client read: %v, want the proxy to close it", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
		t.Fatalf("client closed after %v, want about the 300ms dial timeout", took)
	}
	s := stat(p, hole)
	if s.Failures != 1 || !strings.Contains(s.LastError, "i/o timeout") {
		t.Fatalf("after the timeout: %+v, want one failure, an i/o timeout", s)
	}
	if n := synSent(t, hole); n != 0 {
		t.Fatalf("%d sockets still connecting to the black hole after the timeout", n)
	}
}

// Shutdown that stops waiting aborts a client's dial in flight at once,
// not after DialTimeout.
func TestShutdownAbortsDialInFlight(t *testing.T) {
	hole := blackHole(t)
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{hole},
		DialTimeout:       time.Minute,
		RebalanceInterval: -1,
		Logger:            log,
	})
	ln, served := listenAndServe(t, p)
	c := mustDial(t, ln.Addr().String())
	deadline := time.Now().Add(pinproxytest.WaitFor)
	for stat(p, hole).Dials == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the proxy never dialed the black hole")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // into the connect
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want context.DeadlineExceeded (a handler was dialing)", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Shutdown took %v, want the dial aborted at once", took)
	}
	if err := <-served; !errors.Is(err, pinproxy.ErrProxyClosed) {
		t.Fatalf("Serve = %v", err)
	}
	c.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
	if _, err := c.Read(make([]byte, 1)); err == nil || pinproxytest.IsTimeout(err) {
		t.Fatalf("client read: %v, want it closed", err)
	}
	if s := stat(p, hole); s.Failures != 0 {
		t.Fatalf("an aborted dial counted against the upstream: %+v", s)
	}
	if n := synSent(t, hole); n != 0 {
		t.Fatalf("%d sockets still connecting to the black hole after Shutdown", n)
	}
}

// An upstream given by name is resolved at the dial and proxied as any
// other.
func TestUpstreamByName(t *testing.T) {
	up := pinproxytest.New(t, "A", pinproxytest.Line)
	_, port, _ := net.SplitHostPort(up.Addr)
	name := net.JoinHostPort("localhost", port)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{name}, RebalanceInterval: -1})
	addr := serve(t, p)
	if _, on := pinproxytest.Dial(t, addr, "c1"); on != "A" {
		t.Fatalf("c1 landed on %q, want A", on)
	}
}

// An upstream that speaks first, and may be done before the proxy has
// seen its connect end, reaches the client whole: its bytes and its
// half-close can come with the connect's own event, which a loop then
// reads at once (the upstream's socket is in the loop's set from the
// connect on, and its edge does not come again).
func TestDialUpstreamSpeaksFirst(t *testing.T) {
	up := pinproxytest.New(t, "U", func(_ *pinproxytest.Node, c net.Conn) {
		io.WriteString(c, "hello")
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
	})
	p := newProxy(t, pinproxy.Config{Upstreams: []string{up.Addr}, RebalanceInterval: -1})
	addr := serve(t, p)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Errorf("worker %d, connection %d: %v", w, i, err)
					return
				}
				c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
				b, err := io.ReadAll(c)
				c.Close()
				if err != nil || string(b) != "hello" {
					t.Errorf("worker %d, connection %d: read %q, %v; want hello, then EOF", w, i, b, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
