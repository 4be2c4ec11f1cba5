package main

import (
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// A stderr that never drains (a journald that is not reading) costs log
// lines, never service or the exit: with every log write blocked from
// the first line, the platform serves, and SIGTERM ends it promptly. Its
// first log line once held it for ever, and SIGTERM with it.
func TestBinaryStderrBlocked(t *testing.T) {
	bin := platformBinary(t)
	dir := t.TempDir()
	addr := testkit.FreeAddr(t)
	cmd := exec.Command(bin, "-token-file", writeTokens(t, dir), "-listen", addr, "-state-dir", dir, "-plan-every", "50ms")
	ended := testkit.StartStderrBlocked(t, cmd)
	testkit.WaitFor(t, "the platform answering /healthz", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	time.Sleep(200 * time.Millisecond) // a few plan rounds
	took := testkit.Terminate(t, cmd, ended, 30*time.Second)
	t.Logf("exited %v after SIGTERM, status %d", took.Round(time.Millisecond), cmd.ProcessState.ExitCode())
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
}
