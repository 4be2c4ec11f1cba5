package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// hungSource's first Read blocks until its context ends, as a reading of
// a file on a hung FUSE or network mount does (the probe returns by the
// context's deadline); later Reads answer.
type hungSource struct {
	*fakeSource
	mu    sync.Mutex
	calls int
}

func (h *hungSource) Read(ctx context.Context) (overload.Reading, error) {
	h.mu.Lock()
	h.calls++
	first := h.calls == 1
	h.mu.Unlock()
	if first {
		<-ctx.Done()
		return overload.Reading{}, ctx.Err()
	}
	return h.fakeSource.Read(ctx)
}

// TestRunBoundsAHungReading: a reading that never finishes by itself
// fails by Run's deadline, is logged and counted, and the next one is
// taken; before, Run waited on it for as long as the agent ran.
func TestRunBoundsAHungReading(t *testing.T) {
	var log testkit.LogBuffer
	src := &hungSource{fakeSource: newFakeSource()}
	a, err := New(Config{Node: "n1", Source: src, Interval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a.stepTimeout = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testkit.WaitFor(t, "a reading after the hung one", func() bool { return a.hist.latest() != nil })
	if v := testCounter(t, a, "proofkit_agent_reading_errors_total"); v != 1 {
		t.Errorf("reading errors = %v, want 1 (the hung reading)", v)
	}
	if !strings.Contains(log.String(), "did not finish by its deadline") {
		t.Errorf("the log does not say the reading ran out of time:\n%s", log.String())
	}
}

// TestUnhealthyWhenNoReadingEverSucceeds: /healthz's check fails once the
// agent has run three intervals without evaluating one reading (every
// reading fails, say the -proc tree went away), as it does three
// intervals after the latest reading.
func TestUnhealthyWhenNoReadingEverSucceeds(t *testing.T) {
	src := newFakeSource()
	src.err = errors.New("no /proc")
	a, err := New(Config{Node: "n1", Source: src, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Healthy(); err != nil {
		t.Errorf("healthy before Run: %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testkit.WaitFor(t, "Healthy to fail", func() bool {
		err := a.Healthy()
		return err != nil && strings.Contains(err.Error(), "no reading evaluated in the")
	})
}

// TestQueuedSeqPastTheBound: a queue line of the saved run whose seq is
// absurd (a corrupt file) is not gone on from, which would overflow the
// next seq and have every reading refused.
func TestQueuedSeqPastTheBound(t *testing.T) {
	dir := t.TempDir()
	a, err := New(Config{Node: "n1", Source: newFakeSource(), StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	run := a.run
	a.Close()
	line := fmt.Sprintf(`{"v":2,"node":"n1","run":%q,"seq":18446744073709551615}`+"\n", run)
	if err := os.WriteFile(filepath.Join(dir, queueFile), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	src := newFakeSource()
	src.at = time.Now()
	a, err = New(Config{Node: "n1", Source: src, StateDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Step(context.Background()); err != nil {
		t.Errorf("a reading after a queue line with seq 2^64-1: %v", err)
	}
}

// TestBadRunKeepsLastNotice: a state set aside for its run keeps its
// tracker's last notice, so no second notice goes out within the hour.
func TestBadRunKeepsLastNotice(t *testing.T) {
	dir := t.TempDir()
	src := newFakeSource()
	src.at = time.Now().Add(-10 * time.Minute)
	src.setMem(95)
	a, err := New(Config{Node: "n1", Source: src, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	steps(t, a, src, 95, 5)
	notice := a.tracker.LastNotice()
	a.Close()
	if notice.IsZero() {
		t.Fatal("no notice in five readings at 95 %")
	}
	edited(func(*testing.T, string) {}, "run", "not a run id!")(t, dir)
	a, err = New(Config{Node: "n1", Source: newFakeSource(), StateDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.run == "not a run id!" {
		t.Fatal("the bad run was restored")
	}
	if got := a.tracker.LastNotice(); !got.Equal(notice) {
		t.Errorf("last notice after the state was set aside: %v, want %v", got, notice)
	}
}
