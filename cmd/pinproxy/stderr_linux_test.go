package main

import (
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// A stderr that never drains (a journald that is not reading) costs log
// lines, never service or the exit: connections are served with every
// log write blocked, and SIGTERM still ends the process promptly. Its
// log's output once held the exit for ever.
func TestBinaryStderrBlocked(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	size, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, size)); err != nil { // full before the first line
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(binary, "-listen", addr, "-log-level", "debug", "-upstreams", a.Addr)
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-waited
		}
	}()
	testkit.WaitFor(t, "pinproxy listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	for i := range 20 { // each a log line or two, none written
		cl, _ := pinproxytest.Dial(t, addr, "c")
		if on, err := cl.Ping(); err != nil || on != "A" {
			t.Fatalf("connection %d with stderr blocked: %q, %v", i, on, err)
		}
		cl.Conn.Close()
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
	case <-time.After(pinproxytest.WaitFor):
		t.Fatalf("pinproxy did not exit within %v of SIGTERM with its stderr blocked", pinproxytest.WaitFor)
	}
	t.Logf("exited %v after SIGTERM, status %d", time.Since(start).Round(time.Millisecond), cmd.ProcessState.ExitCode())
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
}
