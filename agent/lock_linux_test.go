package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockFileNotOurs: a lock file that is a symbolic link or a FIFO is
// refused at New, naming it, and nothing is written through it (the pid
// once went over the link's target).
func TestLockFileNotOurs(t *testing.T) {
	for _, kind := range []string{"symlink", "fifo", "dir"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(t.TempDir(), "hostname")
			if err := os.WriteFile(target, []byte("keep\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, lockFile)
			var err error
			switch kind {
			case "symlink":
				err = os.Symlink(target, path)
			case "fifo":
				err = mkfifo(path)
			case "dir":
				err = os.Mkdir(path, 0o700)
			}
			if err != nil {
				t.Fatal(err)
			}
			a, err := New(Config{Node: "n1", Source: newFakeSource(), StateDir: dir, Logger: testLogger(t)})
			if err == nil {
				a.Close()
				t.Fatal("New over a lock file that is not a regular file: no error")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("New: %v, want an error naming %s", err, path)
			}
			if b, _ := os.ReadFile(target); string(b) != "keep\n" {
				t.Errorf("the link's target now holds %q", b)
			}
		})
	}
}

// TestStateDirLocked: a second agent on a state directory in use fails at
// New with one line naming the directory and the pid holding it, and
// leaves the directory alone; once the first closes, a new one starts and
// finds the first one's state. A lock file left by a dead agent locks
// nothing.
func TestStateDirLocked(t *testing.T) {
	dir := t.TempDir()
	// As a crash leaves it: a pid, no lock.
	if err := os.WriteFile(filepath.Join(dir, lockFile), []byte("999999999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := newFakeSource()
	first, err := New(Config{Node: "n1", Source: src, StateDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("New over a stale lock file: %v", err)
	}
	if _, err := first.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		t.Fatal(err)
	}

	second, err := New(Config{Node: "n1", Source: newFakeSource(), StateDir: dir, Logger: testLogger(t)})
	if !errors.Is(err, ErrLocked) || second != nil {
		t.Fatalf("second New on %s: err %v (agent returned: %v); want an error wrapping ErrLocked", dir, err, second != nil)
	}
	msg := err.Error()
	if !strings.Contains(msg, dir) || !strings.Contains(msg, fmt.Sprintf("(pid %d)", os.Getpid())) || strings.Contains(msg, "\n") {
		t.Errorf("error %q: want one line naming %s and pid %d", msg, dir, os.Getpid())
	}
	if b, err := os.ReadFile(filepath.Join(dir, stateFile)); err != nil || !bytes.Equal(b, saved) {
		t.Errorf("the refused agent touched state.json: %v", err)
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	third, err := New(Config{Node: "n1", Source: src, StateDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("New after the first agent closed: %v", err)
	}
	defer third.Close()
	if st := third.Status(); st.Reading == nil {
		t.Errorf("the agent after the first did not restore its state: %+v", st)
	}
	if _, err := third.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestFailedNewReleasesLock: a New that fails after it locked the state
// directory releases the lock.
func TestFailedNewReleasesLock(t *testing.T) {
	dir := t.TempDir()
	queue := filepath.Join(dir, queueFile)
	if err := os.Mkdir(queue, 0o700); err != nil { // a queue New cannot read
		t.Fatal(err)
	}
	if _, err := New(Config{Node: "n1", Source: newFakeSource(), StateDir: dir}); err == nil {
		t.Fatal("New with a directory as its report queue: no error")
	}
	if err := os.Remove(queue); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Node: "n1", Source: newFakeSource(), StateDir: dir})
	if err != nil {
		t.Fatalf("New after a failed New: %v", err)
	}
	a.Close()
}
