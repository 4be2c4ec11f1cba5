package main

import (
	"net"
	"os/exec"
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
	took := testkit.Terminate(t, cmd, ended, pinproxytest.WaitFor)
	t.Logf("exited %v after SIGTERM, status %d", took.Round(time.Millisecond), cmd.ProcessState.ExitCode())
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
}
