package pinproxy_test

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

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
