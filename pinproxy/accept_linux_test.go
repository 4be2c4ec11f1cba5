package pinproxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// A proxy out of file descriptors stops taking clients (its loops take
// the listener out of their sets, Serve backs off), and takes them again
// once descriptors are free: the clients queued meanwhile are served, and
// so is the next. The proxy runs in a process of its own with a limit of
// 100 open files, so the limit is its alone.
func TestAcceptOutOfDescriptorsAndBack(t *testing.T) {
	up := pinproxytest.New(t, "U", pinproxytest.Echo)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLimitedProxy$")
	cmd.Env = append(os.Environ(), "PINPROXY_LIMITED_PROXY="+up.Addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log testkit.LogBuffer
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		io.Copy(&log, stderr)
	}()
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
		<-logged
		if t.Failed() {
			t.Logf("proxy log:\n%s", &log)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "proxy ")
	if err != nil || !ok {
		t.Fatalf("proxy process: %q, %v", line, err)
	}

	// 150 clients, each wanting two descriptors of the proxy: it runs out
	// well before the last, which wait in the listen queue.
	var conns []net.Conn
	for i := range 150 {
		c, err := net.DialTimeout("tcp", addr, pinproxytest.WaitFor)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	testkit.WaitFor(t, "the proxy to run out of descriptors", func() bool {
		return strings.Contains(log.String(), "for want of local resources")
	})
	// Out of descriptors, it closes at most one client per loop, the one
	// whose upstream's socket found none; the others wait, in the listen
	// queue or relayed. Its back-offs go by meanwhile (5 ms, 10 ms, ...),
	// and none takes a client it has no room for.
	time.Sleep(500 * time.Millisecond)
	closed := 0
	buf := make([]byte, 1)
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
		c.SetReadDeadline(time.Time{})
	}
	if loops := runtime.GOMAXPROCS(0); closed > loops {
		t.Errorf("the proxy closed %d of 150 clients for want of descriptors; want at most one per loop (%d)", closed, loops)
	}
	// The first clients are served while it has descriptors left: 30 of
	// them fit in its 100 with room to spare. Each loop closes at most
	// the one client whose upstream's socket found no descriptor, and a
	// loop can be that late with one of the first (another took the
	// descriptors between its accept and its dial).
	lost := 0
	for i, c := range conns[:30] {
		if err := echoErr(c, "first"); err != nil {
			t.Logf("client %d: %v", i, err)
			lost++
		}
	}
	if loops := runtime.GOMAXPROCS(0); lost > loops {
		t.Fatalf("%d of the first 30 clients not served; want at most one per loop (%d)", lost, loops)
	}
	for _, c := range conns {
		c.Close()
	}
	// Descriptors free again: a new client is served. Not at once: the
	// proxy first sees the closes, and takes the clients that waited in
	// the listen queue, each for a dial and its close, while the new one
	// may be among them and closed for want of a descriptor as they were.
	testkit.WaitFor(t, "a new client served once descriptors are free", func() bool {
		return tryEcho(addr, "after") == nil
	})
}

// tryEcho connects to addr, writes msg and reads it back within
// pinproxytest.WaitFor.
func tryEcho(addr, msg string) error {
	c, err := net.DialTimeout("tcp", addr, pinproxytest.WaitFor)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != msg {
		return fmt.Errorf("read %q, want %q", b, msg)
	}
	return nil
}

// echoErr writes msg on c and reads it back within pinproxytest.WaitFor.
func echoErr(c net.Conn, msg string) error {
	c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(c, b); err != nil || string(b) != msg {
		return fmt.Errorf("read %q, %v", b, err)
	}
	return nil
}

// TestHelperLimitedProxy is the proxy of TestAcceptOutOfDescriptorsAndBack
// when run by it: a limit of 100 open files, its log on stderr, until
// stdin closes.
func TestHelperLimitedProxy(t *testing.T) {
	upstream := os.Getenv("PINPROXY_LIMITED_PROXY")
	if upstream == "" {
		t.Skip("the proxy of TestAcceptOutOfDescriptorsAndBack, run in a process of its own")
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 100, Max: 100}); err != nil {
		t.Fatal(err)
	}
	p, err := pinproxy.New(pinproxy.Config{
		Upstreams:         []string{upstream},
		RebalanceInterval: -1,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := p.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.Serve(ln) })
	fmt.Println("proxy", ln.Addr())
	io.Copy(io.Discard, os.Stdin) // until the test closes it
	ctx, cancel := context.WithTimeout(context.Background(), pinproxytest.WaitFor)
	defer cancel()
	p.Shutdown(ctx)
	wg.Wait()
}

// Clients queued on the listener before Serve (as after a hand-over's
// hold or a back-off) are all served, however many, with no client
// arriving after them: a loop takes at most a batch of them at a
// wake-up, and the listener, level-triggered in the loops' sets, wakes a
// loop again for the rest.
func TestAcceptQueuedBeyondABatch(t *testing.T) {
	up := pinproxytest.New(t, "A", pinproxytest.Line)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{up.Addr}, RebalanceInterval: -1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := 64*runtime.GOMAXPROCS(0) + 64 // more than every loop's first batch
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), pinproxytest.WaitFor)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "id c%d\n", i); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	served := serveOn(p, ln)
	defer shutdown(t, p, served)
	defer closeConns(conns) // before the shutdown, which waits for them
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
			if _, err := fmt.Fprintf(c, "ping\n"); err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				t.Errorf("client %d of %d queued before Serve: no answer: %v", i, n, err)
			}
		})
	}
	wg.Wait()
}

func closeConns(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}
