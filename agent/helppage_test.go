package agent

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// The operators' help: "Your agent reports its load every 30 seconds."
// A Config that leaves Interval zero gets exactly that.
func TestSeedReportsEvery30Seconds(t *testing.T) {
	if DefaultInterval != 30*time.Second {
		t.Errorf("DefaultInterval = %v, the help page says every 30 seconds", DefaultInterval)
	}
	a, err := New(Config{Node: "n1", Source: newFakeSource()})
	if err != nil {
		t.Fatal(err)
	}
	if a.interval != 30*time.Second {
		t.Errorf("zero Config.Interval gives %v, want 30s", a.interval)
	}
}

// "You get at most one an hour for a node; every start and end is in the
// node's event list", and the notice "says what was passed, in figures":
// two overloads a few seconds apart give two starts and an end in the
// event list, one notice in the log with its figure, and a notice counter
// of one.
func TestSeedOneNoticeAnHourEveryEventListed(t *testing.T) {
	var log testkit.LogBuffer
	src := newFakeSource()
	a, err := New(Config{Node: "n1", Source: src, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	steps(t, a, src, 95, 3) // start, notice
	steps(t, a, src, 40, 3) // end
	steps(t, a, src, 95, 3) // start again within the hour: no notice

	var kinds []overload.EventKind
	for _, e := range a.Events() {
		kinds = append(kinds, e.Kind)
	}
	if want := []overload.EventKind{overload.Start, overload.End, overload.Start}; !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
	if v := testCounter(t, a, "proofkit_agent_notices_total"); v != 1 {
		t.Errorf("proofkit_agent_notices_total = %v, want 1 (at most one an hour)", v)
	}
	out := log.String()
	if n := strings.Count(out, `msg="overload notice"`); n != 1 {
		t.Errorf("logged %d notices, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, `notice="n1 is overloaded: memory at 95 %"`) {
		t.Errorf("the notice does not give its figure:\n%s", out)
	}
	if n := strings.Count(out, `msg="node overloaded"`); n != 2 {
		t.Errorf("logged %d starts, want 2:\n%s", n, out)
	}
}
