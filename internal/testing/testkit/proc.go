package testkit

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is a child process a test runs, its output kept while it runs.
type Proc struct {
	Cmd *exec.Cmd
	// Log holds every line the process wrote to stdout or stderr.
	Log  LogBuffer
	done chan struct{}
}

// StartProc starts cmd with its stdout and stderr going, line by line,
// into the Proc's Log and to onLine (nil: none), which runs on the
// reading goroutine. When t ends the process is sent SIGTERM, killed if
// it has not ended 10 s later, and waited for.
func StartProc(t testing.TB, cmd *exec.Cmd, onLine func(line string)) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.Log.Write([]byte(line + "\n"))
			if onLine != nil {
				onLine(line)
			}
		}
		io.Copy(io.Discard, pr) // a line over the limit: keep the pipe flowing
	}()
	go func() {
		cmd.Wait()
		pw.Close()
		<-read
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Done is closed once the process has ended and its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Terminate sends cmd's process SIGTERM and waits for ended (closed once
// the process has ended, as Proc.Done and StartStderrBlocked's) for at
// most within, failing t if it has not ended by then. It returns the time
// from the signal to the end, as the test saw it.
func Terminate(t testing.TB, cmd *exec.Cmd, ended <-chan struct{}, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(within):
		t.Fatalf("%s still running %v after SIGTERM", cmd.Path, within)
	}
	return time.Since(start)
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Proc) Kill() {
	p.Cmd.Process.Kill()
	<-p.done
}

// ProcMemory is a memory figure of process pid in bytes: field is a line
// of /proc/PID/status given in kB, such as VmHWM (the peak resident set)
// or VmRSS. It fails t if the process or the field is not there.
func ProcMemory(t testing.TB, pid int, field string) int64 {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/status", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %s: %v", path, field, err)
			}
			return kib << 10
		}
	}
	t.Fatalf("%s: no %s", path, field)
	return 0
}
