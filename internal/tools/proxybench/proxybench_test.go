package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// startPinproxy runs pinproxy in this process in front of upstreams.
func startPinproxy(t *testing.T, upstreams []string) string {
	t.Helper()
	ln, stop, err := servePinproxy("127.0.0.1:0", upstreams, true, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return ln.Addr().String()
}

// startFloor starts the epoll floor in front of upstreams and returns its
// address; it skips the test where the floor does not run (not Linux).
func startFloor(t *testing.T, upstreams []string) string {
	t.Helper()
	f, err := serveFloor(upstreams)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip("the epoll floor runs on Linux only")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.stop)
	return f.addr()
}

// TestSmoke runs each measurement briefly, direct and through pinproxy, and
// checks that it produced a figure; it asserts nothing about speed.
func TestSmoke(t *testing.T) {
	s, err := startSink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	for _, tc := range []struct {
		name string
		// start returns the address that leads to upstreams.
		start func(t *testing.T, upstreams []string) string
	}{
		{"direct", func(_ *testing.T, upstreams []string) string { return upstreams[0] }},
		{"pinproxy", startPinproxy},
		{"floor", startFloor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bulk, echo := tc.start(t, s.bulkAddrs()), tc.start(t, s.echoAddrs())
			bps, err := throughput(bulk, 2, 50*time.Millisecond)
			if err != nil || bps <= 0 {
				t.Errorf("throughput = %v, %v; want > 0, nil", bps, err)
			}
			c, err := connRate([]string{echo}, 2, 50*time.Millisecond)
			if err != nil || c.ok <= 0 || c.failed != 0 {
				t.Errorf("connRate = %d made, %d failed, %v; want > 0, 0, nil", c.ok, c.failed, err)
			}
			conns, err := openIdle(echo, 20, 4)
			if err != nil {
				t.Fatalf("openIdle: %v", err)
			}
			closeAll(conns)
		})
	}
}

// hashingUpstream reads each connection to EOF, then writes back the
// SHA-256 of what it read followed by size bytes of a stream seeded by the
// first 8 bytes it read, and closes. So the client can check both ways.
func hashingUpstream(t *testing.T, size int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go acceptLoop(ln, func(c net.Conn) {
		defer c.Close()
		h := sha256.New()
		var head bytes.Buffer
		if _, err := io.Copy(io.MultiWriter(h, &limitedBuffer{&head, 8}), c); err != nil {
			return
		}
		c.Write(h.Sum(nil))
		io.Copy(c, io.LimitReader(seeded(head.Bytes()), int64(size)))
	})
	return ln.Addr().String()
}

type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if k := min(l.n-l.b.Len(), len(p)); k > 0 {
		l.b.Write(p[:k])
	}
	return len(p), nil
}

func seeded(head []byte) io.Reader {
	var seed uint64
	for _, b := range head {
		seed = seed<<8 | uint64(b)
	}
	return rand.NewChaCha8([32]byte{0: byte(seed), 1: byte(seed >> 8), 2: byte(seed >> 16), 3: byte(seed >> 24)})
}

// TestIntegrity sends bursts with pauses between them through pinproxy and the floor (so
// each direction goes idle and wakes again, the path that matters for the
// pipe-less copy), half-closes, and checks every byte both ways: the
// upstream returns the hash of what it got and then a stream of its own.
func TestIntegrity(t *testing.T) {
	const down = 3<<20 + 17
	for _, tc := range []struct {
		name  string
		start func(*testing.T, []string) string
	}{
		{"pinproxy", startPinproxy},
		{"floor", startFloor}, // the yardstick must move every byte too
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.start(t, []string{hashingUpstream(t, down)})
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					if err := integrityRun(addr, uint64(i), down); err != nil {
						t.Errorf("connection %d: %v", i, err)
					}
				})
			}
			wg.Wait()
		})
	}
}

func integrityRun(addr string, seed uint64, down int) error {
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	r := rand.New(rand.NewPCG(seed, 1))
	h := sha256.New()
	var head []byte
	for burst := range 12 {
		// Sizes from 1 byte to 1.5 MiB, so some bursts are bigger than
		// a splice pipe (1 MiB) and some are a single byte.
		n := 1 + r.IntN([]int{1, 16, 4 << 10, 64 << 10, 1536 << 10}[burst%5])
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		if len(head) < 8 {
			head = append(head, p[:min(8-len(head), len(p))]...)
		}
		h.Write(p)
		if _, err := c.Write(p); err != nil {
			return fmt.Errorf("burst %d: %w", burst, err)
		}
		time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	got, err := io.ReadAll(c)
	if err != nil {
		return fmt.Errorf("reading the reply: %w", err)
	}
	if len(got) != sha256.Size+down {
		return fmt.Errorf("reply of %d bytes, want %d", len(got), sha256.Size+down)
	}
	if !bytes.Equal(got[:sha256.Size], h.Sum(nil)) {
		return fmt.Errorf("the upstream got other bytes than were sent")
	}
	want, _ := io.ReadAll(io.LimitReader(seeded(head), int64(down)))
	if !bytes.Equal(got[sha256.Size:], want) {
		return fmt.Errorf("the client got other bytes than the upstream sent")
	}
	return nil
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestProcReaders(t *testing.T) {
	pid := os.Getpid()
	if rss, err := vmRSS(pid); err != nil || rss <= 0 {
		t.Errorf("vmRSS = %d, %v; want > 0, nil", rss, err)
	}
	if n, err := openFDs(pid); err != nil || n < 3 {
		t.Errorf("openFDs = %d, %v; want ≥ 3, nil", n, err)
	}
	if _, err := cpuTime(pid); err != nil {
		t.Errorf("cpuTime: %v", err)
	}
	if _, err := vmRSS(-1); err == nil {
		t.Error("vmRSS(-1) gave no error")
	}
}

func TestParsePin(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: no two lists to tell apart")
	}
	for _, tc := range []struct {
		in          string
		proxy, load []int
		bad         bool
	}{
		{in: "1/0", proxy: []int{1}, load: []int{0}},
		{in: "0-1/0,1,0", proxy: []int{0, 1}, load: []int{0, 1}},
		{in: "1", bad: true},
		{in: "1/", bad: true},
		{in: "1-0/0", bad: true},
		{in: fmt.Sprintf("%d/0", runtime.NumCPU()), bad: true},
	} {
		proxy, load, err := parsePin(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parsePin(%q) = %v, %v, nil; want an error", tc.in, proxy, load)
			}
			continue
		}
		if err != nil || !slices.Equal(proxy, tc.proxy) || !slices.Equal(load, tc.load) {
			t.Errorf("parsePin(%q) = %v, %v, %v; want %v, %v, nil", tc.in, proxy, load, err, tc.proxy, tc.load)
		}
	}
}
