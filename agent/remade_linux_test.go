package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateDirRemovedWhileRunning: the state directory removed under a
// running agent (rm -rf of it, to "reset" a node) left every later save
// failing with "no such file or directory" and /readyz at 503 until a
// restart, with the queued reports in memory only. The agent now makes
// the directory again at the next save, locks it again (so no second
// agent can start on it meanwhile), and writes the whole queue there.
func TestStateDirRemovedWhileRunning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	var log bytes.Buffer
	cfg := Config{Node: "n1", Source: newFakeSource(), StateDir: dir, ReportURL: "http://127.0.0.1:1/r", Token: "t",
		Logger: slog.New(slog.NewTextHandler(&log, nil))}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	step := func() {
		t.Helper()
		if _, err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	step()
	step()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	step()
	if err := a.Ready(); err != nil {
		t.Errorf("after the directory was removed: Ready = %v", err)
	}
	if !strings.Contains(log.String(), `msg="the state directory was removed while the agent ran; made it again"`) {
		t.Errorf("no line saying the directory was made again:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
		t.Errorf("state not saved again: %v", err)
	}
	step() // a push after the directory came back writes the whole queue
	b, err := os.ReadFile(filepath.Join(dir, queueFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n != 4 {
		t.Errorf("queue file holds %d reports, want the 4 queued:\n%s", n, b)
	}
	// The directory is locked again: a second agent cannot share it.
	if _, err := New(cfg); !errors.Is(err, ErrLocked) {
		t.Errorf("a second agent on the remade directory: %v, want ErrLocked", err)
	}
}

// TestStateDirTakenWhileRunning: with the state directory removed and a
// second agent started on its path meanwhile, the first wrote its state
// and reports into the second's directory: two agents on one state, what
// the lock is there to prevent. Now the first sees that the lock file is
// no longer the one it holds and keeps its state and queue in memory,
// and its /readyz says why.
func TestStateDirTakenWhileRunning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	cfg := Config{Node: "n1", Source: newFakeSource(), StateDir: dir, ReportURL: "http://127.0.0.1:1/r", Token: "t"}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Node: "n2", Source: newFakeSource(), StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, stateFile))
	if _, err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(); err == nil {
		t.Error("Save into another agent's directory succeeded")
	}
	after, _ := os.ReadFile(filepath.Join(dir, stateFile))
	if !bytes.Equal(before, after) || !bytes.Contains(after, []byte(`"node":"n2"`)) {
		t.Errorf("the other agent's state.json was written over:\n%s", after)
	}
	if q, err := os.ReadFile(filepath.Join(dir, queueFile)); err == nil && len(q) > 0 {
		t.Errorf("reports written into the other agent's queue:\n%s", q)
	}
	if err := a.Ready(); err == nil || !strings.Contains(err.Error(), "another agent") {
		t.Errorf("Ready = %v, want it to say another agent holds the directory", err)
	}
}
