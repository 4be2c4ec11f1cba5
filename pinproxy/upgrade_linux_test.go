package pinproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/pinproxy/handover"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// handoffPair returns the two ends of a SOCK_SEQPACKET socket pair.
func handoffPair(t *testing.T) (old, nu *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "handoff")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// pattern is n bytes that say where in the stream each one is.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// flightLab is an upstream whose connections do what the client's first
// byte says: 'S' sends big (32 MiB, to a client that reads only later),
// 'H' reads to EOF and then answers, 'E' echoes.
type flightLab struct {
	ln      net.Listener
	big     []byte
	written atomic.Int64  // of big, to the 'S' client
	answer  chan struct{} // closed: 'H' connections answer
	mu      sync.Mutex
	conns   []net.Conn
}

func newFlightLab(t *testing.T) *flightLab {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lab := &flightLab{ln: ln, big: pattern(stallSize(t)), answer: make(chan struct{})}
	t.Cleanup(func() {
		ln.Close()
		lab.mu.Lock()
		for _, c := range lab.conns {
			c.Close()
		}
		lab.mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			lab.mu.Lock()
			lab.conns = append(lab.conns, c)
			lab.mu.Unlock()
			go lab.serve(c.(*net.TCPConn))
		}
	}()
	return lab
}

// stallSize is how much the 'S' stream sends: more than the sockets on
// its way can hold, so that it stalls when the client reads nothing. The
// proxy's upstream socket may take up to tcp_rmem's most, its client
// socket and the upstream's each tcp_wmem's (on a host whose tcp_rmem
// most is 32 MiB, as on the build machine, the first alone held the
// whole 32 MiB the stream once was).
func stallSize(t *testing.T) int {
	t.Helper()
	most := func(name string) int {
		b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b))
		n, err := strconv.Atoi(f[len(f)-1])
		if len(f) != 3 || err != nil {
			t.Fatalf("%s: %q, want three numbers", name, b)
		}
		return n
	}
	return max(32<<20, most("tcp_rmem")+2*most("tcp_wmem")+16<<20)
}

func (lab *flightLab) serve(c *net.TCPConn) {
	defer c.Close()
	var kind [1]byte
	if _, err := io.ReadFull(c, kind[:]); err != nil {
		return
	}
	switch kind[0] {
	case 'S':
		for b := lab.big; len(b) > 0; {
			n, err := c.Write(b[:min(len(b), 8<<10)])
			lab.written.Add(int64(n))
			if err != nil {
				return
			}
			b = b[n:]
		}
		c.CloseWrite()
		io.Copy(io.Discard, c)
	case 'H':
		got, _ := io.ReadAll(c)
		<-lab.answer
		c.Write(got) // after the client's half-close: the reply
	case 'E':
		io.Copy(c, c)
	}
}

// stalledClient dials through addr with a small receive buffer, asks for
// the big stream and reads nothing yet; it returns once the upstream's
// writes have stopped (everything between is full).
func stalledClient(t *testing.T, addr string, lab *flightLab) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.Write([]byte("S"))
	deadline := time.Now().Add(pinproxytest.WaitFor)
	for last := int64(-1); ; {
		time.Sleep(200 * time.Millisecond)
		n := lab.written.Load()
		if n == last && n > 0 {
			break
		}
		if n == int64(len(lab.big)) || time.Now().After(deadline) {
			t.Fatalf("the upstream wrote %d of %d bytes: the stream did not stall", n, len(lab.big))
		}
		last = n
	}
	return c.(*net.TCPConn)
}

// handOver hands everything of oldP to newP, over a socket pair, as an
// upgrade does: newP adopts, serves the listeners it took and says it is
// ready; it returns what oldP's Handoff reported.
func handOver(t *testing.T, oldP, newP *Proxy) HandoffResult {
	t.Helper()
	ucOld, ucNew := handoffPair(t)
	adopted := make(chan *Adopted, 1)
	go func() {
		a, err := newP.Adopt(context.Background(), handover.NewPeer(ucNew, nil))
		if err != nil {
			t.Error(err)
		}
		adopted <- a
	}()
	ready := make(chan HandoffResult, 1)
	go func() {
		res, err := oldP.Handoff(context.Background(), handover.NewPeer(ucOld, nil))
		if err != nil {
			t.Error(err)
		}
		ready <- res
	}()
	a := <-adopted
	if a == nil {
		t.FailNow()
	}
	for _, ln := range a.Listeners {
		go newP.Serve(ln)
	}
	waitFor(t, "the new proxy to serve", func() bool { return newP.Ready() == nil })
	a.Ready(context.Background())
	return <-ready
}

func newTestProxy(t *testing.T, up string) *Proxy {
	t.Helper()
	return newTestProxyOf(t, up, false)
}

// newGoroutineTestProxy is newTestProxy relaying with goroutines rather
// than event loops.
func newGoroutineTestProxy(t *testing.T, up string) *Proxy {
	t.Helper()
	return newTestProxyOf(t, up, true)
}

func newTestProxyOf(t *testing.T, up string, goroutines bool) *Proxy {
	t.Helper()
	p, err := New(Config{Upstreams: []string{up}, RebalanceInterval: -1, ParkAfter: 50 * time.Millisecond, goroutines: goroutines})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	return p
}

// A connection whose client reads nothing during the hand-over has bytes
// stuck on their way to it; they move with the connection, and the client
// later reads every byte, in order. A half-closed connection stays
// half-closed and gets its reply; a parked one parks again; the listener
// keeps its queue, and the new proxy serves it.
func TestHandoffMovesBytesInFlight(t *testing.T) {
	lab := newFlightLab(t)
	oldP := newTestProxy(t, lab.ln.Addr().String())
	ln, err := oldP.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- oldP.Serve(ln) }()
	addr := ln.Addr().String()

	stalled := stalledClient(t, addr, lab)
	half, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	question := pattern(3000)
	half.Write(append([]byte("H"), question...))
	half.(*net.TCPConn).CloseWrite()
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.Write([]byte("E"))
	waitFor(t, "the idle connection to park", func() bool { return oldP.park.parkedNow() >= 1 })

	newP := newTestProxy(t, lab.ln.Addr().String())
	res := handOver(t, oldP, newP)
	t.Logf("Handoff: %+v", res)
	if !res.Committed || !res.Ready || res.Conns != 3 || res.Parked < 1 || res.Pending == 0 {
		t.Fatalf("Handoff: %+v; want committed and ready, 3 connections, one parked at least, bytes pending", res)
	}
	if err := <-served; !errors.Is(err, ErrProxyClosed) {
		t.Errorf("the old proxy's Serve returned %v, want ErrProxyClosed", err)
	}
	if tot := newP.Totals(); tot.Live != 3 || tot.Upgrades != 1 || tot.Accepted != 3 {
		t.Errorf("new proxy's totals %+v: want 3 live, 1 upgrade, 3 accepted", tot)
	}

	stalled.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
	got, err := io.ReadAll(stalled)
	if err != nil || !bytes.Equal(got, lab.big) {
		t.Errorf("the stalled client read %d bytes (%v), want the %d sent, in order: equal %v", len(got), err, len(lab.big), bytes.Equal(got, lab.big))
	}
	close(lab.answer)
	half.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
	reply, err := io.ReadAll(half)
	if err != nil || !bytes.Equal(reply, question) {
		t.Errorf("the half-closed client got %d bytes (%v), want its %d back", len(reply), err, len(question))
	}
	idle.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	idle.Write([]byte("ping"))
	var pong [4]byte
	if _, err := io.ReadFull(idle, pong[:]); err != nil || string(pong[:]) != "ping" {
		t.Errorf("the parked connection: %q, %v", pong, err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("a new client after the hand-over: %v", err)
	}
	c.Close()
	if s := newP.Stats()[0]; s.BytesReceived < int64(len(lab.big)) {
		t.Errorf("new proxy counts %d bytes down, want the old proxy's and its own: at least %d", s.BytesReceived, len(lab.big))
	}
}

// When the new side gives up half-way, the old proxy keeps everything:
// the bytes it had cut short are written out, the streams go on, and it
// accepts again.
func TestHandoffRollsBack(t *testing.T) {
	lab := newFlightLab(t)
	oldP := newTestProxy(t, lab.ln.Addr().String())
	ln, err := oldP.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go oldP.Serve(ln)
	addr := ln.Addr().String()
	stalled := stalledClient(t, addr, lab)
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.Write([]byte("E"))
	waitFor(t, "the idle connection to park", func() bool { return oldP.park.parkedNow() >= 1 })

	ucOld, ucNew := handoffPair(t)
	go func() { // asks, reads the hello and one batch, then goes away
		sendRequest(ucNew)
		for range 2 {
			readAndDrop(ucNew)
		}
		ucNew.Close()
	}()
	res, err := oldP.Handoff(context.Background(), handover.NewPeer(ucOld, nil))
	if err == nil || res.Committed {
		t.Fatalf("Handoff to a side that went away: %+v, %v; want an error, not committed", res, err)
	}
	if res.Pending == 0 && res.Conns == 0 {
		t.Logf("Handoff: %+v", res)
	}
	close(lab.answer)
	if tot := oldP.Totals(); tot.UpgradesFailed != 1 || tot.Live != 2 {
		t.Errorf("totals %+v: want 1 failed upgrade, 2 live", tot)
	}
	stalled.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
	got, err := io.ReadAll(stalled)
	if err != nil || !bytes.Equal(got, lab.big) {
		t.Errorf("the stalled client read %d bytes (%v), want the %d sent, in order: equal %v", len(got), err, len(lab.big), bytes.Equal(got, lab.big))
	}
	idle.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	idle.Write([]byte("ping"))
	var pong [4]byte
	if _, err := io.ReadFull(idle, pong[:]); err != nil || string(pong[:]) != "ping" {
		t.Errorf("the parked connection: %q, %v", pong, err)
	}
	c, err := net.DialTimeout("tcp", addr, pinproxytest.WaitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("Ehello"))
	c.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
	var b [5]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "hello" {
		t.Errorf("a client after the rollback: %q, %v", b, err)
	}
}

// sendRequest asks for a hand-over, as a new process does first.
func sendRequest(uc *net.UnixConn) {
	uc.Write([]byte(fmt.Sprintf(`Q{"version":%d,"pid":%d}`, handover.Version, os.Getpid())))
}

// readAndDrop reads one message of a hand-over, as a new process that
// then gives up would, and closes the descriptors it carried. Each is a
// copy of a socket the old proxy keeps after the rollback: left open, it
// keeps that socket open after the proxy closes it, and the tests that
// follow in the same process have that many descriptors fewer.
func readAndDrop(uc *net.UnixConn) {
	buf, oob := make([]byte, 1<<19), make([]byte, 1<<12)
	_, oobn, _, _, _ := uc.ReadMsgUnix(buf, oob)
	msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
	for i := range msgs {
		fds, _ := syscall.ParseUnixRights(&msgs[i])
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(pinproxytest.WaitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Hand-overs that fail, over and over, while connections park, wake and
// copy: every connection comes back each time and still echoes.
func TestHandoffRollbackStress(t *testing.T) {
	lab := newFlightLab(t)
	p, err := New(Config{Upstreams: []string{lab.ln.Addr().String()}, RebalanceInterval: -1, ParkAfter: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	ln, err := p.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	var conns []net.Conn
	for range 100 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("E"))
		conns = append(conns, c)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // some connections wake now and then
		defer close(done)
		buf := make([]byte, 3)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			c := conns[i%len(conns)]
			c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
			if _, err := c.Write([]byte("abc")); err != nil {
				t.Error(err)
				return
			}
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "abc" {
				t.Errorf("echo: %q, %v", buf, err)
				return
			}
		}
	}()
	for i := range 20 {
		ucOld, ucNew := handoffPair(t)
		go func() {
			sendRequest(ucNew)
			readAndDrop(ucNew)
			if i%2 == 0 {
				readAndDrop(ucNew)
			}
			ucNew.Close()
		}()
		if res, err := p.Handoff(context.Background(), handover.NewPeer(ucOld, nil)); err == nil || res.Committed {
			t.Fatalf("round %d: %+v, %v; want a rollback", i, res, err)
		}
		time.Sleep(time.Duration(i%4) * 5 * time.Millisecond)
	}
	close(stop)
	<-done
	if tot := p.Totals(); tot.Live != len(conns) || tot.UpgradesFailed != 20 {
		t.Errorf("totals %+v: want %d live, 20 failed upgrades", tot, len(conns))
	}
	for i, c := range conns {
		c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
		c.Write([]byte("xyz"))
		var b [3]byte
		if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "xyz" {
			t.Fatalf("connection %d after the rollbacks: %q, %v", i, b, err)
		}
	}
}

// slowAccept is a listener whose Accept, once accept(2) has taken a
// connection off the queue, waits until let is closed before it returns
// it: a Serve loop preempted there, as a loaded host does now and then.
type slowAccept struct {
	*net.TCPListener
	took chan struct{} // gets one value per connection taken
	let  chan struct{}
}

func (ln *slowAccept) Accept() (net.Conn, error) {
	c, err := ln.TCPListener.Accept()
	if err == nil {
		ln.took <- struct{}{}
		<-ln.let
	}
	return c, err
}

// clientInAccept starts a proxy on lab's upstream, serving a listener
// whose Accept holds each client it takes off the queue until slow.let is
// closed, and dials it with a client that has sent "Ehello"; it returns
// once Serve has taken that client. served gets Serve's return.
func clientInAccept(t *testing.T, lab *flightLab) (p *Proxy, slow *slowAccept, c net.Conn, served chan error) {
	t.Helper()
	p = newTestProxy(t, lab.ln.Addr().String())
	ln, err := p.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	slow = &slowAccept{TCPListener: ln.(*net.TCPListener), took: make(chan struct{}, 16), let: make(chan struct{})}
	served = make(chan error, 1)
	go func() { served <- p.Serve(slow) }()
	c, err = net.DialTimeout("tcp", ln.Addr().String(), pinproxytest.WaitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.Write([]byte("Ehello"))
	select {
	case <-slow.took:
	case <-time.After(pinproxytest.WaitFor):
		t.Fatal("Serve did not accept the client")
	}
	return p, slow, c, served
}

// handoff is what Handoff returned.
type handoff struct {
	res HandoffResult
	err error
}

// startHandoff runs p.Handoff(ctx, uc) in a goroutine; the channel gets
// what it returns.
func startHandoff(ctx context.Context, p *Proxy, uc *net.UnixConn) chan handoff {
	handed := make(chan handoff, 1)
	go func() {
		res, err := p.Handoff(ctx, handover.NewPeer(uc, nil))
		handed <- handoff{res, err}
	}()
	return handed
}

// A client that Serve has taken off the listen queue but not admitted yet
// when a hand-over holds the accepts is waited for and handed over with
// the rest: left out, it would stay in the old proxy, which, closed by
// the commit, closes it with its first bytes unread (a reset).
func TestHandoffTakesClientsBeingAccepted(t *testing.T) {
	lab := newFlightLab(t)
	oldP, slow, c, served := clientInAccept(t, lab)

	newP := newTestProxy(t, lab.ln.Addr().String())
	ucOld, ucNew := handoffPair(t)
	adopted := make(chan error, 1)
	go func() {
		a, err := newP.Adopt(context.Background(), handover.NewPeer(ucNew, nil))
		if err == nil {
			for _, ln := range a.Listeners {
				go newP.Serve(ln)
			}
			err = a.Ready(context.Background())
		}
		adopted <- err
	}()
	handed := startHandoff(context.Background(), oldP, ucOld)
	select {
	case h := <-handed:
		t.Errorf("Handoff returned (%+v, %v) while Serve held a client it had taken off the queue", h.res, h.err)
		handed <- h
	case <-time.After(300 * time.Millisecond):
	}
	close(slow.let)
	h := <-handed
	if err := <-adopted; err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if h.err != nil || !h.res.Committed {
		t.Fatalf("Handoff: %+v, %v; want committed", h.res, h.err)
	}
	if h.res.Conns != 1 {
		t.Errorf("Handoff moved %d connections, want 1: the client being accepted", h.res.Conns)
	}
	if err := <-served; !errors.Is(err, ErrProxyClosed) {
		t.Errorf("the old proxy's Serve returned %v, want ErrProxyClosed", err)
	}
	c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	var b [5]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "hello" {
		t.Fatalf("the client accepted during the hand-over: %q, %v; want its echo", b, err)
	}
	c.Write([]byte("again"))
	if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "again" {
		t.Errorf("the client, served by the new proxy: %q, %v", b, err)
	}
	if tot := newP.Totals(); tot.Live != 1 || tot.Accepted != 1 {
		t.Errorf("new proxy's totals %+v: want the client live, 1 accepted", tot)
	}
}

// listOrder is each upstream's connections, clients' addresses, oldest
// first, as the rebalancer sees them (it moves the newest: the tail).
func listOrder(p *Proxy) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, u := range p.upstreams {
		for c := u.head; c != nil; c = c.next {
			out = append(out, c.client.RemoteAddr().String())
		}
	}
	return out
}

// A hand-over keeps each upstream's connections in the order they were
// accepted, so the new proxy's rounds still move the newest: the links
// stop in whatever order their goroutines run, and the new proxy links
// them in the order they come.
func TestHandoffKeepsAcceptOrder(t *testing.T) {
	lab := newFlightLab(t)
	oldP := newTestProxy(t, lab.ln.Addr().String())
	ln, err := oldP.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go oldP.Serve(ln)
	for i := range 40 {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), pinproxytest.WaitFor)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("Ehi"))
		c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
		var b [2]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	want := listOrder(oldP)
	if len(want) != 40 {
		t.Fatalf("%d connections linked, want 40", len(want))
	}
	newP := newTestProxy(t, lab.ln.Addr().String())
	ucOld, ucNew := handoffPair(t)
	adopted := make(chan error, 1)
	go func() {
		a, err := newP.Adopt(context.Background(), handover.NewPeer(ucNew, nil))
		if err == nil {
			err = a.Ready(context.Background())
		}
		adopted <- err
	}()
	if res, err := oldP.Handoff(context.Background(), handover.NewPeer(ucOld, nil)); err != nil || !res.Committed {
		t.Fatalf("Handoff: %+v, %v", res, err)
	}
	if err := <-adopted; err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if got := listOrder(newP); !slices.Equal(got, want) {
		t.Errorf("the new proxy's connections, oldest first:\n%v\nwant the old one's:\n%v", got, want)
	}
}

// A Serve that starts on a new listener during a hand-over waits until
// the hand-over ends: it listed the listeners before, so it neither holds
// nor hands over the new one, and an Accept on it would keep it waiting
// for the Serve loops to settle until its ctx ended. After a commit that
// Serve returns ErrProxyClosed; after a rollback it accepts.
func TestServeDuringHandoff(t *testing.T) {
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "commit", false: "rollback"}[commit]
		t.Run(name, func(t *testing.T) {
			lab := newFlightLab(t)
			// A client Serve has taken off the queue but not admitted
			// keeps the hand-over waiting until let is closed.
			oldP, slow, _, _ := clientInAccept(t, lab)

			newP := newTestProxy(t, lab.ln.Addr().String())
			ucOld, ucNew := handoffPair(t)
			if commit {
				go func() {
					a, err := newP.Adopt(context.Background(), handover.NewPeer(ucNew, nil))
					if err != nil {
						t.Error(err)
						return
					}
					for _, ln := range a.Listeners {
						go newP.Serve(ln)
					}
					a.Ready(context.Background())
				}()
			} else {
				go func() { // asks, then goes away: the hello fails
					sendRequest(ucNew)
					readAndDrop(ucNew)
					ucNew.Close()
				}()
			}
			// Bounded: a hand-over that waits for the new listener's
			// Serve loop ends here.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			handed := startHandoff(ctx, oldP, ucOld)
			waitFor(t, "the hand-over to hold the accepts", func() bool {
				oldP.upg.mu.Lock()
				defer oldP.upg.mu.Unlock()
				return oldP.upg.held != nil
			})

			late, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lateServed := make(chan error, 1)
			go func() { lateServed <- oldP.Serve(late) }()
			waitFor(t, "Serve to list the new listener", func() bool {
				oldP.mu.Lock()
				defer oldP.mu.Unlock()
				_, ok := oldP.listeners[late]
				return ok
			})
			close(slow.let)
			h := <-handed
			if errors.Is(h.err, context.DeadlineExceeded) {
				t.Fatalf("Handoff waited until its ctx ended: %+v, %v", h.res, h.err)
			}
			if h.res.Committed != commit {
				t.Fatalf("Handoff: %+v, %v; want committed %v", h.res, h.err, commit)
			}
			if commit {
				select {
				case err := <-lateServed:
					if !errors.Is(err, ErrProxyClosed) {
						t.Errorf("Serve on the new listener returned %v, want ErrProxyClosed", err)
					}
				case <-time.After(pinproxytest.WaitFor):
					t.Error("Serve on the new listener still runs after the commit")
				}
				return
			}
			lc, err := net.DialTimeout("tcp", late.Addr().String(), pinproxytest.WaitFor)
			if err != nil {
				t.Fatal(err)
			}
			defer lc.Close()
			lc.Write([]byte("Ehello"))
			lc.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
			var b [5]byte
			if _, err := io.ReadFull(lc, b[:]); err != nil || string(b[:]) != "hello" {
				t.Errorf("a client of the new listener after the rollback: %q, %v", b, err)
			}
		})
	}
}
