// Package testkit holds the helpers nodekit's tests share: waiting for a
// condition, a log sink safe to read while a logger writes, the skip for
// tests that need root, building the commands under test once (Build)
// and running one as a child process (StartProc). It is imported by _test.go files, by the other
// helpers under internal/testing, by pinproxy/pinproxytest and by the
// harnesses under internal/tools; never by code that ships in a binary.
package testkit

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// Timeout is how long WaitFor waits. It is generous because the build
// machines are shared and noisy; a test that passes waits far less.
const Timeout = 30 * time.Second

// WaitFor polls cond every 10 ms until it holds, and fails t with "timed
// out waiting for WHAT" after Timeout.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForWithin(t, Timeout, what, cond)
}

// WaitForWithin is WaitFor with its own timeout.
func WaitForWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// LogBuffer is an io.Writer a test may read (String) while another
// goroutine writes to it, e.g. as the sink of a slog.Logger.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// NeedRoot skips t, with a one-line reason, unless it runs as root and
// every named tool is in PATH.
func NeedRoot(t testing.TB, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root")
	}
	NeedTools(t, tools...)
}

// NeedTools skips t unless every named tool is in PATH.
func NeedTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: needs %s in PATH", tool)
		}
	}
}

// FreeAddr returns a loopback TCP address (127.0.0.1:port) nothing
// listens on just now, for a process the test starts to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// MountTmpfs mounts a tmpfs of size (mount(8)'s size=, such as "64k") on
// dir, with mode 0700, and unmounts it when t ends. It returns mount's
// error with its output, for the caller to skip or log on; it needs root.
func MountTmpfs(t testing.TB, dir, size string) error {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mount a tmpfs of %s on %s: %v: %s", size, dir, err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return nil
}

// FillDisk appends to path (created if need be) until its file system
// refuses a write: then it is full to the last byte. It returns the error
// of an open or close, never the refused write's.
func FillDisk(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	for _, n := range []int{4096, 64, 1} { // to the last byte
		for {
			if _, err := f.Write(make([]byte, n)); err != nil {
				break
			}
		}
	}
	return f.Close()
}
