package pinproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// parkNow parks a connection as soon as both its directions wait.
const parkNow = time.Nanosecond

// echoExact writes back what it reads, byte for byte.
func echoExact(_ *pinproxytest.Node, c net.Conn) { io.Copy(c, c) }

// An idle connection parks (its goroutines end), wakes on data from
// either side with every byte intact, parks again, and ends when the
// client closes.
func TestParkWakesOnEitherSide(t *testing.T) {
	var upConn = make(chan net.Conn, 1)
	up := pinproxytest.New(t, "U", func(_ *pinproxytest.Node, c net.Conn) {
		upConn <- c
		<-t.Context().Done()
	})
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{up.Addr}, ParkAfter: parkNow, RebalanceInterval: -1, Logger: log})
	addr := serve(t, p)
	before := runtime.NumGoroutine()
	c := mustDial(t, addr)
	u := <-upConn
	testkit.WaitFor(t, "the connection parks", func() bool { return pinproxy.ParkedForTest(p) == 1 })
	// +3: the upstream's handler, the parker's one goroutine waiting for
	// events (or the loop that holds the connection), and the proxy's line
	// goroutine, which Serve may have started after before was taken; and
	// so may it have started its other event loops (one per GOMAXPROCS,
	// each taking the listener's clients).
	most := before + 3 + runtime.GOMAXPROCS(0) - 1
	testkit.WaitFor(t, "its goroutines end", func() bool { return runtime.NumGoroutine() <= most })

	msg := bytes.Repeat([]byte("client→upstream "), 5000) // 80 kB: a burst, then a splice
	for round := range 3 {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(u, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("round %d: upstream read %d bytes, err %v; equal %v", round, len(got), err, bytes.Equal(got, msg))
		}
		testkit.WaitFor(t, "the connection parks again", func() bool { return pinproxy.ParkedForTest(p) == 1 })
		if _, err := u.Write(msg[:100]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got[:100]); err != nil || !bytes.Equal(got[:100], msg[:100]) {
			t.Fatalf("round %d: client read %q, %v", round, got[:100], err)
		}
		testkit.WaitFor(t, "the connection parks again", func() bool { return pinproxy.ParkedForTest(p) == 1 })
	}
	s := p.Stats()[0]
	if want := int64(3 * len(msg)); s.BytesSent != want || s.BytesReceived != 300 {
		t.Errorf("bytes up/down = %d/%d while live, want %d/300", s.BytesSent, s.BytesReceived, want)
	}
	// The client's close reaches the upstream as a half-close; the
	// upstream's close then ends the connection.
	c.Close()
	testkit.WaitFor(t, "the upstream reads EOF", func() bool { return pinproxytest.ClosedConn(u) })
	u.Close()
	testkit.WaitFor(t, "the proxy ends the connection", func() bool { return p.Totals().Live == 0 })
}

// The byte counters move as bytes are copied, splice included, not when
// the connection ends; and ParkAfter < 0 never parks.
func TestBytesCountedLive(t *testing.T) {
	up := pinproxytest.New(t, "E", echoExact)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{up.Addr}, ParkAfter: -1, RebalanceInterval: -1})
	addr := serve(t, p)
	c := mustDial(t, addr)
	var sent int64
	for _, n := range []int{1, 100, 16 << 10, 1 << 20} {
		b := bytes.Repeat([]byte{'x'}, n)
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		sent += int64(n)
		testkit.WaitFor(t, fmt.Sprintf("the counters at %d bytes", sent), func() bool {
			s := p.Stats()[0]
			return s.BytesSent == sent && s.BytesReceived == sent
		})
	}
	time.Sleep(50 * time.Millisecond)
	if n := pinproxy.ParkedForTest(p); n != 0 {
		t.Errorf("ParkAfter -1: %d connections parked", n)
	}
}

// echoProcess starts this test binary again as an echo server (see
// TestHelperEchoProcess) and returns its address: 5,000 connections'
// client, proxy and upstream sockets do not fit under one process's limit
// of 20,000 open files.
func echoProcess(t *testing.T) string {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperEchoProcess$")
	cmd.Env = append(os.Environ(), "PINPROXY_ECHO_PROCESS=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "echo ")
	if err != nil || !ok {
		t.Fatalf("echo process: %q, %v", line, err)
	}
	return addr
}

// TestHelperEchoProcess is the echo server of echoProcess when run by it.
func TestHelperEchoProcess(t *testing.T) {
	if os.Getenv("PINPROXY_ECHO_PROCESS") != "1" {
		t.Skip("the echo server of TestPark5000, run in a process of its own")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("echo", ln.Addr())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { io.Copy(c, c); c.Close() })
		}
	})
	io.Copy(io.Discard, os.Stdin) // until the test closes it
	ln.Close()
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	wg.Wait()
}

// 5,000 connections park, leaving no goroutine of the proxy's behind; a
// random tenth wake with data each way, and every byte arrives.
func TestPark5000(t *testing.T) {
	const n = 5000
	if testing.Short() {
		t.Skip("5,000 connections; not with -short")
	}
	p := newProxy(t, pinproxy.Config{Upstreams: []string{echoProcess(t)}, ParkAfter: parkNow, RebalanceInterval: -1})
	addr := serve(t, p)
	runtime.GC()
	before := runtime.NumGoroutine()

	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns[i] = c
		defer c.Close()
	}
	// Each carries a byte first, as a long-lived link does.
	for i, c := range conns {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	one := make([]byte, 1)
	for i, c := range conns {
		if _, err := io.ReadFull(c, one); err != nil || one[0] != byte(i) {
			t.Fatalf("connection %d: echo %v, %v", i, one, err)
		}
	}
	testkit.WaitForWithin(t, time.Minute, "every connection parks", func() bool { return pinproxy.ParkedForTest(p) == n })
	if g := goroutinesSettle(before, 5); g > 5 {
		t.Errorf("%d goroutines more with %d connections parked, want at most 5:\n%s", g, n, goroutineStacks())
	} else {
		t.Logf("goroutines: %d before, %d more with %d connections parked", before, g, n)
	}

	woken := rand.Perm(n)[:n/10]
	var wg sync.WaitGroup
	errs := make(chan error, len(woken))
	for _, i := range woken {
		wg.Go(func() {
			c := conns[i]
			msg := bytes.Repeat([]byte(fmt.Sprintf("%05d.", i)), 1+i%4000) // 6 B to 24 kB
			if _, err := c.Write(msg); err != nil {
				errs <- err
				return
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
				errs <- fmt.Errorf("connection %d: %d bytes back, err %v, equal %v", i, len(got), err, bytes.Equal(got, msg))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	testkit.WaitForWithin(t, time.Minute, "the woken connections park again", func() bool { return pinproxy.ParkedForTest(p) == n })
	if g := goroutinesSettle(before, 5); g > 5 {
		t.Errorf("%d goroutines more after the wake-ups, want at most 5:\n%s", g, goroutineStacks())
	}
	for _, c := range conns {
		c.Close()
	}
	testkit.WaitForWithin(t, time.Minute, "every connection ends", func() bool { return p.Totals().Live == 0 })
}

// goroutinesSettle waits until the process runs at most limit goroutines
// more than before, for testkit.Timeout at most, and returns how many more
// it runs. A goroutine counts until it has exited, after it did what the
// test waited for: a link's goroutine after it parked its link, a test's
// goroutine after its WaitGroup.Done. Under load many can be on their way
// out at once, so only a count that stays up is a leak.
func goroutinesSettle(before, limit int) int {
	deadline := time.Now().Add(testkit.Timeout)
	for {
		g := runtime.NumGoroutine() - before
		if g <= limit || time.Now().After(deadline) {
			return g
		}
		time.Sleep(time.Millisecond)
	}
}

// goroutineStacks returns every goroutine's stack, alike ones grouped.
func goroutineStacks() string {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

// Thousands of connections park, wake and are closed at once from every
// side: clients, the upstream, rebalance rounds, closes during the
// park itself, and finally a forced Shutdown. Nothing races (go test
// -race), nothing hangs, and the proxy ends with nothing live.
func TestParkStress(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	a := pinproxytest.New(t, "A", echoExact)
	b := pinproxytest.New(t, "B", echoExact)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr, b.Addr}, ParkAfter: parkNow, RebalanceInterval: time.Millisecond})
	ln, served := listenAndServe(t, p)
	addr := ln.Addr().String()

	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range n / 16 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return
				}
				for range r.IntN(4) {
					time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond) // parks
					msg := bytes.Repeat([]byte{'s'}, 1+r.IntN(40000))
					c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
					if _, err := c.Write(msg); err != nil {
						break // a rebalance round closed it
					}
					if _, err := io.ReadFull(c, msg); err != nil {
						break
					}
				}
				switch r.IntN(3) {
				case 0:
					c.Close()
				case 1:
					c.(*net.TCPConn).CloseWrite()
					c.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
					io.Copy(io.Discard, c)
					c.Close()
				default:
					defer c.Close() // left open for Shutdown
				}
			}
		})
	}
	// Rebalance rounds close parked connections from their own goroutine
	// all along (an uneven spread builds up as clients leave); add some.
	stop := make(chan struct{})
	var rb sync.WaitGroup
	rb.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			p.Rebalance(context.Background())
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
	close(stop)
	rb.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	p.Shutdown(ctx) // forced: closes what is left, parked or not
	if err := <-served; err != pinproxy.ErrProxyClosed {
		t.Errorf("Serve: %v", err)
	}
	if live := p.Totals().Live; live != 0 {
		t.Errorf("%d connections live after Shutdown", live)
	}
	if n := pinproxy.ParkedForTest(p); n != 0 {
		t.Errorf("%d connections parked after Shutdown", n)
	}
}

// BenchmarkWake measures a burst of one byte each way through a parked
// connection (parked after 20 ms idle, so it stays awake until the reply
// is back), which wakes it (the epoll event, a fresh goroutine, the
// deadlines cleared, the copy path started), against the same burst
// through a connection that never parks; the difference is what a wake-up
// costs. The proxy's CPU time per burst is reported as cpu-µs/op (the
// process's user+system time, so it includes the echo upstream and the
// client, the same in both). Each burst follows 25 ms of quiet. Run it on
// an otherwise idle machine:
//
//	go test -run - -bench Wake -benchtime 200x ./pinproxy
func BenchmarkWake(b *testing.B) {
	for _, bc := range []struct {
		name  string
		after time.Duration
	}{{"never parked", -1}, {"parked", 20 * time.Millisecond}} {
		b.Run(bc.name, func(b *testing.B) {
			up := pinproxytest.New(b, "E", echoExact)
			p := newProxy(b, pinproxy.Config{Upstreams: []string{up.Addr}, ParkAfter: bc.after, RebalanceInterval: -1})
			c := mustDial(b, serve(b, p))
			buf := []byte{1}
			var cpu time.Duration
			for b.Loop() {
				// Both wait as long between bursts: a process idle for
				// a while takes longer to wake, parked or not.
				b.StopTimer()
				time.Sleep(25 * time.Millisecond)
				for bc.after > 0 && pinproxy.ParkedForTest(p) != 1 {
					time.Sleep(time.Millisecond)
				}
				b.StartTimer()
				before := cpuTime(b)
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime(b) - before
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
