package pinproxy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// blackHole returns a loopback address whose SYNs are dropped, without
// root: a listener with backlog 1 that never accepts. Linux queues
// backlog+1 connections on it; once that queue is full the kernel drops
// each further SYN (counting a ListenOverflow), so a dial waits for its
// SYN retransmits and times out, as against a firewalled or frozen host.
func blackHole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "blackhole")
	defer f.Close()
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	ln, err := net.FileListener(f) // never accepts
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	addr := ln.Addr().String()

	for i := 0; ; i++ {
		if i == 10 {
			t.Fatal("the listen queue of a backlog-1 listener never filled")
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if pinproxytest.IsTimeout(err) {
			return addr
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
}

// An upstream that drops SYNs costs one dial timeout; the client then goes
// to the next upstream.
func TestFailoverWhenUpstreamBlackHoles(t *testing.T) {
	hole := blackHole(t)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams:         []string{hole, b.Addr},
		DialTimeout:       300 * time.Millisecond,
		RebalanceInterval: -1,
		Logger:            log,
	})
	addr := serve(t, p)
	if _, on := pinproxytest.Dial(t, addr, "c1"); on != "B" {
		t.Fatalf("c1 landed on %s, want B", on)
	}
	s := stat(p, hole)
	if s.Failures != 1 || s.Answered || !strings.Contains(s.LastError, "timeout") {
		t.Fatalf("black hole after one dial: %+v, want a timeout failure", s)
	}
	// A rebalance round's test-connect to it times out too, and closes nothing.
	if _, on := pinproxytest.Dial(t, addr, "c2"); on != "B" {
		t.Fatalf("c2 landed on %s, want B", on)
	}
	if err := p.Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s := stat(p, hole); s.Failures != 2 || p.Totals().Moves != 0 {
		t.Fatalf("round against the black hole: %+v, %d moves", s, p.Totals().Moves)
	}
}

// One client probes an upstream whose back-off ended while it still does
// not answer; the others go to the upstream that answers without waiting.
func TestBlackHoleProbedByOneClient(t *testing.T) {
	hole := blackHole(t)
	probeAfterBackoff(t, hole)
}

func probeAfterBackoff(t *testing.T, hole string) {
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	log, _ := testLogger(t)
	var clock fakeClock
	cfg := pinproxy.Config{Upstreams: []string{hole, b.Addr}, DialTimeout: 3 * time.Second, RebalanceInterval: -1, Logger: log}
	pinproxy.SetClockForTest(&cfg, clock.now)
	p := newProxy(t, cfg)
	addr := serve(t, p)
	if _, on := pinproxytest.Dial(t, addr, "first"); on != "B" { // fails over after one timeout
		t.Fatalf("first landed on %s", on)
	}
	clock.advance(pinproxy.DefaultFailedBackoff) // the back-off is over
	const clients = 50
	var mu sync.Mutex
	var slow int
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			start := time.Now()
			pinproxytest.Dial(t, addr, fmt.Sprint("c", i))
			if time.Since(start) > 2*time.Second { // waited on the black hole
				mu.Lock()
				slow++
				mu.Unlock()
			}
		})
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	if slow > 1 {
		t.Fatalf("%d of %d clients waited on the black hole, want at most one", slow, clients)
	}
	if d := stat(p, hole).Dials; d > 3 {
		t.Fatalf("%d dials to the black hole, want the first and one probe per back-off", d)
	}
}

// The same against a host whose firewall drops the SYNs: an address in a
// network namespace of the test's own, behind a veth pair, with an nft
// rule dropping TCP to it.
func TestIntegrationBlackHoleNftProbedByOneClient(t *testing.T) {
	testkit.NeedRoot(t, "ip", "nft")
	probeAfterBackoff(t, nftBlackHole(t))
}

// nftBlackHole returns an address whose SYNs an nft rule drops.
func nftBlackHole(t *testing.T) string {
	t.Helper()
	pid := os.Getpid()
	ns := fmt.Sprintf("proxyctl-bh-%d", pid)
	host, peer := fmt.Sprintf("pxch%d", pid%100000), fmt.Sprintf("pxcn%d", pid%100000)
	// 10.233.X.0/30 with X from the pid, so parallel runs do not clash.
	x := pid % 250
	hostIP, nsIP := fmt.Sprintf("10.233.%d.1", x), fmt.Sprintf("10.233.%d.2", x)
	run := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", host).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	run("ip", "link", "add", host, "type", "veth", "peer", "name", peer, "netns", ns)
	run("ip", "addr", "add", hostIP+"/30", "dev", host)
	run("ip", "link", "set", host, "up")
	run("ip", "-n", ns, "addr", "add", nsIP+"/30", "dev", peer)
	run("ip", "-n", ns, "link", "set", peer, "up")
	run("ip", "-n", ns, "link", "set", "lo", "up")
	run("ip", "netns", "exec", ns, "nft", "add table inet bh; add chain inet bh in { type filter hook input priority 0; }; add rule inet bh in tcp dport 9333 drop")
	addr := net.JoinHostPort(nsIP, "9333")
	if _, err := net.DialTimeout("tcp", addr, 300*time.Millisecond); !pinproxytest.IsTimeout(err) {
		t.Fatalf("dial to the dropped address: %v, want a timeout", err)
	}
	return addr
}
