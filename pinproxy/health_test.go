package pinproxy_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// With checks on, an upstream is unknown until checked, goes down after
// CheckFall failed checks and then takes no clients and no client dials,
// and comes back after CheckRise checks answer.
func TestHealthChecks(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1,
		CheckInterval: 20 * time.Millisecond, CheckRise: 2, CheckFall: 3, Logger: log,
	})
	for _, s := range p.Stats() {
		if s.State != "unknown" {
			t.Fatalf("%s before any check: %s, want unknown", s.Addr, s.State)
		}
	}
	addr := serve(t, p)
	testkit.WaitFor(t, "A up and B down", func() bool {
		return stat(p, a.Addr).State == "up" && stat(p, b.Addr).State == "down"
	})
	if f := stat(p, b.Addr).Failures; f < 3 {
		t.Fatalf("B down after %d failed checks, want at least 3", f)
	}
	for _, id := range []string{"c1", "c2", "c3"} {
		if _, on := pinproxytest.Dial(t, addr, id); on != "A" {
			t.Fatalf("%s landed on %s while B is down, want A", id, on)
		}
	}
	// Only the checks dialled B: no client's dial failed over from it.
	if strings.Contains(logs.String(), "trying the next") {
		t.Fatal("a client dialled B while the checks had it down")
	}
	if err := p.Ready(); err != nil {
		t.Fatalf("not ready with A up: %v", err)
	}
	b.Start()
	testkit.WaitFor(t, "B up", func() bool { return stat(p, b.Addr).State == "up" })
	if !strings.Contains(logs.String(), `msg="health check: upstream up"`) {
		t.Fatal("no log line for B coming up")
	}
	if _, on := pinproxytest.Dial(t, addr, "c4"); on != "B" {
		t.Fatalf("c4 landed on %s once B is up, want B", on)
	}
}

// With every upstream down by the checks, the proxy is not ready.
func TestReadyNeedsAnUpstreamUp(t *testing.T) {
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{b.Addr}, RebalanceInterval: -1, CheckInterval: 20 * time.Millisecond, CheckFall: 1})
	if err := p.Ready(); err == nil || !strings.Contains(err.Error(), "not listening") {
		t.Fatalf("before serving: Ready() = %v, want an error saying it is not listening", err)
	}
	_, served := listenAndServe(t, p)
	testkit.WaitFor(t, "B down", func() bool { return stat(p, b.Addr).State == "down" })
	if err := p.Ready(); err == nil || !strings.Contains(err.Error(), "no upstream up") {
		t.Fatalf("with the only upstream down: Ready() = %v, want an error saying no upstream is up", err)
	}
	b.Start()
	testkit.WaitFor(t, "ready", func() bool { return p.Ready() == nil })
	shutdown(t, p, served)
	if err := p.Ready(); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("after Shutdown: Ready() = %v, want an error saying it is shutting down", err)
	}
}

// Slow start: an upstream back from down gets a share of new clients that
// grows from nothing, so the first clients after its return still go to
// the busier one; without slow start they go to it at once.
func TestSlowStart(t *testing.T) {
	for _, slow := range []time.Duration{0, time.Minute} {
		a := pinproxytest.New(t, "A", pinproxytest.Line)
		b := pinproxytest.Down(t, "B", pinproxytest.Line)
		var clock fakeClock
		cfg := pinproxy.Config{
			Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1,
			CheckInterval: 20 * time.Millisecond, CheckRise: 1, CheckFall: 1, SlowStart: slow,
		}
		pinproxy.SetClockForTest(&cfg, clock.now)
		p := newProxy(t, cfg)
		addr := serve(t, p)
		testkit.WaitFor(t, "B down", func() bool { return stat(p, b.Addr).State == "down" })
		for i := range 4 {
			pinproxytest.Dial(t, addr, "old"+string(rune('0'+i)))
		}
		b.Start()
		testkit.WaitFor(t, "B up", func() bool { return stat(p, b.Addr).State == "up" })
		onB := 0
		for i := range 4 {
			if _, on := pinproxytest.Dial(t, addr, "new"+string(rune('0'+i))); on == "B" {
				onB++
			}
		}
		if slow == 0 && onB != 4 || slow > 0 && onB != 0 {
			t.Errorf("slow start %v: %d of 4 new clients on B, want %d", slow, onB, map[bool]int{true: 4, false: 0}[slow == 0])
		}
		if slow > 0 { // once the slow start is over, B takes its full share
			clock.advance(slow)
			for i := range 4 {
				if _, on := pinproxytest.Dial(t, addr, "later"+string(rune('0'+i))); on != "B" {
					t.Errorf("after the slow start: client %d on %s, want B (8 on A, none on B)", i, on)
				}
			}
		}
	}
}

// A skew of 200 connections evens out in at most 10 rounds with up to 20
// moves a round, each client redialling as mwebd does.
func TestRebalanceMaxMovesConverges(t *testing.T) {
	const n = 200
	a := pinproxytest.New(t, "A", pinproxytest.Echo)
	b := pinproxytest.Down(t, "B", pinproxytest.Echo)
	p := newProxy(t, pinproxy.Config{
		Upstreams: []string{a.Addr, b.Addr}, RebalanceInterval: -1, RebalanceMaxMoves: 20, FailedBackoff: -1,
	})
	addr := serve(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for range n {
		wg.Go(func() { redialer(ctx, addr) })
	}
	live := func() (la, lb int) { return stat(p, a.Addr).Live, stat(p, b.Addr).Live }
	testkit.WaitFor(t, "200 clients on A", func() bool { la, _ := live(); return la == n })
	b.Start()
	rounds := 0
	for {
		la, lb := live()
		if la-lb < 2 && lb-la < 2 {
			break
		}
		if rounds == 10 {
			t.Fatalf("after 10 rounds: A %d, B %d", la, lb)
		}
		if err := p.Rebalance(ctx); err != nil {
			t.Fatal(err)
		}
		rounds++
		testkit.WaitFor(t, "the moved clients to redial", func() bool { la, lb := live(); return la+lb == n })
	}
	t.Logf("converged in %d rounds, %d moves", rounds, p.Totals().Moves)
	if m := p.Totals().Moves; m != n/2 {
		t.Fatalf("%d moves, want exactly %d", m, n/2)
	}
}

// redialer holds a connection through the proxy and redials whenever it
// is closed, until ctx ends.
func redialer(ctx context.Context, addr string) {
	for ctx.Err() == nil {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		io.Copy(io.Discard, c)
		stop()
		c.Close()
	}
}

// With SendProxy, the upstream reads a PROXY header naming the client.
func TestSendProxy(t *testing.T) {
	for _, v := range []int{1, 2} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		got := make(chan string, 1)
		serveOnce(ln, func(c net.Conn) {
			src, err := readProxyHeader(bufio.NewReader(c), v)
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			got <- src
			io.WriteString(c, "ok\n")
		})
		p := newProxy(t, pinproxy.Config{Upstreams: []string{ln.Addr().String()}, RebalanceInterval: -1, SendProxy: v})
		addr := serve(t, p)
		c := mustDial(t, addr)
		c.Write([]byte("x"))
		if src := <-got; src != c.LocalAddr().String() {
			t.Fatalf("v%d: upstream read source %q, want the client's %s", v, src, c.LocalAddr())
		}
	}
}

// serveOnce accepts one connection on ln, in a goroutine, hands it to h
// and closes it once h returns.
func serveOnce(ln net.Listener, h func(c net.Conn)) {
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		h(c)
	}()
}

// readProxyHeader parses a PROXY header as an upstream would and returns
// the source address.
func readProxyHeader(r *bufio.Reader, v int) (string, error) {
	if v == 1 {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		f := strings.Fields(line)
		if len(f) != 6 || f[0] != "PROXY" || f[1] != "TCP4" || !strings.HasSuffix(line, "\r\n") {
			return "", io.ErrUnexpectedEOF
		}
		return net.JoinHostPort(f[2], f[4]), nil
	}
	h := make([]byte, 16)
	if _, err := io.ReadFull(r, h); err != nil {
		return "", err
	}
	if string(h[:12]) != "\r\n\r\n\x00\r\nQUIT\n" || h[12] != 0x21 || h[13] != 0x11 {
		return "", io.ErrUnexpectedEOF
	}
	body := make([]byte, binary.BigEndian.Uint16(h[14:]))
	if _, err := io.ReadFull(r, body); err != nil || len(body) != 12 {
		return "", io.ErrUnexpectedEOF
	}
	src := netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[:4])), binary.BigEndian.Uint16(body[8:]))
	return src.String(), nil
}

// With health checks off, an upstream whose dial failed makes the proxy
// not ready only for the back-off: nothing but a client would try it
// again, so a proxy that gets clients only while ready must not stay
// not ready for good.
func TestReadyPassiveDownEndsWithBackoff(t *testing.T) {
	for _, backoff := range []time.Duration{time.Hour, 300 * time.Millisecond} {
		b := pinproxytest.Down(t, "B", pinproxytest.Line)
		p := newProxy(t, pinproxy.Config{Upstreams: []string{b.Addr}, RebalanceInterval: -1, FailedBackoff: backoff})
		addr := serve(t, p)
		testkit.WaitFor(t, "ready before any client, with checks off", func() bool { return p.Ready() == nil }) // once Serve has the listener
		c, err := net.DialTimeout("tcp", addr, pinproxytest.WaitFor)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
		c.Read(make([]byte, 1)) // closed: B refuses
		c.Close()
		testkit.WaitFor(t, "B down", func() bool { return stat(p, b.Addr).State == "down" })
		if backoff == time.Hour {
			if p.Ready() == nil {
				t.Fatal("ready within the back-off of the only upstream's failure")
			}
			continue
		}
		testkit.WaitFor(t, "ready once the back-off is over", func() bool { return p.Ready() == nil })
	}
}

// Over IPv6, on a listener of the unspecified address, the PROXY header
// names the client's address and the address it connected to, and bytes
// flow both ways.
func TestSendProxyIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	serveOnce(ln, func(c net.Conn) {
		r := bufio.NewReader(c)
		line, err := r.ReadString('\n')
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- line
		rest, _ := r.ReadString('\n')
		io.WriteString(c, "echo "+rest)
	})
	p := newProxy(t, pinproxy.Config{Upstreams: []string{ln.Addr().String()}, RebalanceInterval: -1, SendProxy: 1})
	pln, err := net.Listen("tcp6", "[::]:0")
	if err != nil {
		t.Skipf("cannot listen on [::]: %v", err)
	}
	served := serveOn(p, pln)
	t.Cleanup(func() { shutdown(t, p, served) })
	port := pln.Addr().(*net.TCPAddr).Port
	c := mustDial(t, net.JoinHostPort("::1", strconv.Itoa(port)))
	io.WriteString(c, "hello\n")
	cl := c.LocalAddr().(*net.TCPAddr)
	want := fmt.Sprintf("PROXY TCP6 ::1 ::1 %d %d\r\n", cl.Port, port)
	if line := <-got; line != want {
		t.Fatalf("upstream read %q, want %q", line, want)
	}
	c.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || reply != "echo hello\n" {
		t.Fatalf("reply %q, %v; want %q", reply, err, "echo hello\n")
	}
}
