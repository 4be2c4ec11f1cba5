package main

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/logbuf"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/handover"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// The log lines buffered when a process connects to -upgrade-socket are
// written out before the hand-over starts, not at the next flush
// interval: the old process's lines come before the new one's.
func TestLogFlushedBeforeHandOff(t *testing.T) {
	var out testkit.LogBuffer
	lw := logbuf.New(&out, logbuf.Config{FlushInterval: time.Hour})
	defer lw.Close()
	log := newLogger(lw, false, 0)
	p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{"127.0.0.1:1"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("a line before the hand-over")

	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fds[1]) // nobody takes it: the hand-over fails
	f := os.NewFile(uintptr(fds[0]), "handoff")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{p: p, log: log, flushLog: lw.Flush, served: make(chan error, 1),
		upgrades: make(chan *handover.Peer, 1), stopUpgrades: func() {}}
	d.o.upgradeTimeout = pinproxytest.WaitFor
	d.upgrades <- handover.NewPeer(c.(*net.UnixConn), nil)
	sigs := make(chan os.Signal, 1)
	waited := make(chan bool, 1)
	go func() {
		_, upgraded := d.wait(sigs)
		waited <- upgraded
	}()
	deadline := time.Now().Add(pinproxytest.WaitFor)
	for !strings.Contains(out.String(), "a line before the hand-over") {
		if time.Now().After(deadline) {
			sigs <- syscall.SIGTERM
			<-waited
			t.Fatalf("the buffered line was not written out at the hand-over; output so far:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	sigs <- syscall.SIGTERM
	if <-waited {
		t.Fatal("wait says upgraded; the hand-over should have failed")
	}
}
