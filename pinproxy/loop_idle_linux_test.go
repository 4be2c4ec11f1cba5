package pinproxy_test

import (
	"bytes"
	"io"
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/proofkit/nodekit/pinproxy"
)

// On the event loops a connection holds no goroutine of its own from its
// first byte, and no pipe once its bytes have moved: 100 KiB each way
// (spliced) through 500 connections leave the proxy no more goroutines
// than its loops and no more descriptors than the sockets and the loops'
// pools of pipes.
func TestLoopIdleHoldsNoGoroutineNorPipe(t *testing.T) {
	if pinproxy.GoroutinesForcedForTest() {
		t.Skip("PINPROXY_TEST_GOROUTINES=1: relayed by goroutines")
	}
	const n = 500
	p := newProxy(t, pinproxy.Config{Upstreams: []string{echoProcess(t)}, RebalanceInterval: -1})
	addr := serve(t, p)
	runtime.GC()
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	msg := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	got := make([]byte, len(msg))
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("connection %d: echo of %d bytes: %v, equal %v", i, len(msg), err, bytes.Equal(got, msg))
		}
	}
	loops := runtime.GOMAXPROCS(0)
	// +2: the line goroutine, and the loops' wave timer.
	if g := goroutinesSettle(goroutines, loops+2); g > loops+2 {
		t.Errorf("%d goroutines more with %d idle connections, want at most %d:\n%s", g, n, loops+2, goroutineStacks())
	}
	const pipesKept = 64 // loopPipesKept
	if d, most := openFDs(t)-fds, 3*n+2*pipesKept*loops; d > most {
		t.Errorf("%d descriptors more with %d idle connections (its client's and the proxy's two sockets each), want at most %d", d, n, most)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Clients that come one at a time, each a long-lived connection, spread
// over the loops: every idle loop is woken for a new client and the
// first to look takes it, so a loop that holds clearly more than another
// hands its new clients to that one.
func TestLoopsShareClientsThatComeOneAtATime(t *testing.T) {
	if pinproxy.GoroutinesForcedForTest() {
		t.Skip("PINPROXY_TEST_GOROUTINES=1: relayed by goroutines")
	}
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one loop: GOMAXPROCS is 1")
	}
	const n = 600
	p := newProxy(t, pinproxy.Config{Upstreams: []string{echoProcess(t)}, RebalanceInterval: -1})
	addr := serve(t, p)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
		if _, err := c.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatalf("connection %d: echo: %v", i, err)
		}
	}
	loads := pinproxy.LoopLoadsForTest(p)
	fair := n / len(loads)
	for i, m := range loads {
		// A loop holds at most an eighth more than another when it gives
		// a client away (and one more, for two loops that looked at once).
		if m < fair-fair/8-2 {
			t.Errorf("loop %d holds %d of %d connections, want about %d: %v", i, m, n, fair, loads)
		}
	}
	t.Logf("connections per loop: %v", loads)
}
