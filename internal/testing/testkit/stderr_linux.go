package testkit

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// StartStderrBlocked starts cmd with its stderr a pipe that is full
// before the process writes its first byte and is never read, so that
// every write to it blocks (a journald that is not reading); stdout is
// left as cmd has it. The returned channel is closed when the process
// has ended (cmd.ProcessState then says how). When t ends a process
// still running is killed and waited for.
func StartStderrBlocked(t testing.TB, cmd *exec.Cmd) (ended <-chan struct{}) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	size, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return done
}
