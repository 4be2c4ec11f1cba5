package main

import (
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// A stderr that never drains (a journald that is not reading) costs log
// lines, never service or the exit: connections are served with every
// log write blocked, and SIGTERM still ends the process promptly. Its
// log's output once held the exit for ever.
func TestBinaryStderrBlocked(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	addr := testkit.FreeAddr(t)
	cmd := exec.Command(binary, "-listen", addr, "-log-level", "debug", "-upstreams", a.Addr)
	ended := testkit.StartStderrBlocked(t, cmd)
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
	case <-ended:
	case <-time.After(pinproxytest.WaitFor):
		t.Fatalf("pinproxy did not exit within %v of SIGTERM with its stderr blocked", pinproxytest.WaitFor)
	}
	t.Logf("exited %v after SIGTERM, status %d", time.Since(start).Round(time.Millisecond), cmd.ProcessState.ExitCode())
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
}
