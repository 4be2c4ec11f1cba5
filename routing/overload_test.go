package routing_test

import (
	"testing"
	"time"

	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// A node fed from a real overload.Tracker: memory at 91 % in 3 of 5
// readings overloads it, moves start 15 minutes later, and when the
// overload ends the marketplace waits before offering it again.
func TestSetOverloadFromTracker(t *testing.T) {
	tr := overload.NewTracker("de-1", overload.Limits{})
	var pol routing.Policy
	n := routing.Node{ID: "de-1", Role: routing.RoleExit, Country: "DE"}
	routes := []routing.Route{route("r", "u", "k", "de-1", "DE", 10, routing.KindOwn, t0)}
	ix := routing.NewIndex(append(routes, route("r2", "u", "k", "de-2", "DE", 10, routing.KindOwn, t0)))

	var seq uint64
	read := func(at time.Time, memory float64) overload.Reading {
		seq++
		r := overload.Reading{Version: overload.ReadingVersion, Run: "run-1", Seq: seq, Node: "de-1", At: at, MemoryUsedPercent: memory, Load15: 0.5, CPUs: 4,
			ConntrackEntries: 10, ConntrackMax: 1000}
		if _, err := tr.Observe(r); err != nil {
			t.Fatalf("observe %v: %v", at.Sub(t0), err)
		}
		return r
	}
	var at time.Time
	var moved time.Duration = -1
	for i := range 40 { // 20 minutes at 91 %
		at = t0.Add(time.Duration(i) * 30 * time.Second)
		n.SetOverload(tr, read(at, 91))
		if i == 1 && n.Overloaded() {
			t.Fatal("overloaded after 2 readings")
		}
		p, err := pol.Plan(at, n, routes, ix)
		if err != nil {
			t.Fatal(err)
		}
		n.State = p.State
		if len(p.Actions) > 0 && moved < 0 {
			moved = at.Sub(t0)
		}
	}
	if want := t0.Add(time.Minute); !n.OverloadedSince.Equal(want) || n.MemoryPercent != 91 {
		t.Fatalf("overloaded since %v at memory %v, want since the third reading (%v) at 91", n.OverloadedSince, n.MemoryPercent, want)
	}
	if ok, why := admit(t, pol, n, at); ok || why != routing.ReasonOverloaded {
		t.Errorf("Admit = %v, %q while overloaded", ok, why)
	}
	if want := 16 * time.Minute; moved != want {
		t.Errorf("first move at %v, want %v (15 minutes after the overload started at 1m)", moved, want)
	}
	// Memory falls: the overload ends within five readings.
	for range 5 {
		at = at.Add(30 * time.Second)
		n.SetOverload(tr, read(at, 40))
	}
	if n.Overloaded() || n.OverloadEnded.IsZero() {
		t.Fatalf("after 5 readings at 40 %%: overloaded %v, ended %v", n.Overloaded(), n.OverloadEnded)
	}
	if ok, why := admit(t, pol, n, at); ok || why != routing.ReasonCoolDown {
		t.Errorf("Admit just after the end = %v, %q; want the cool-down", ok, why)
	}
	if ok, _ := admit(t, pol, n, n.OverloadEnded.Add(routing.DefaultCoolDown)); !ok {
		t.Error("not admitted once the cool-down is over")
	}
	// Unknown memory never counts as high.
	r := overload.Reading{Version: overload.ReadingVersion, Run: "run-1", Seq: seq + 1, Node: "de-1", At: at.Add(time.Minute), Load15: 0.5, CPUs: 4, ConntrackMax: 1000,
		MemoryUsedPercent: 99, Missing: []overload.Input{overload.InputMemory}}
	if _, err := tr.Observe(r); err != nil {
		t.Fatal(err)
	}
	n.SetOverload(tr, r)
	if n.MemoryPercent != 0 {
		t.Errorf("memory %v from a reading that misses it", n.MemoryPercent)
	}
}

// A tracker whose event list holds no end (a new one, or one restored
// without its events) leaves the end the platform stored: the cool-down
// after that overload still holds ("the marketplace waits before offering
// it again").
func TestSetOverloadKeepsAnEarlierEnd(t *testing.T) {
	tr := overload.NewTracker("de-1", overload.Limits{})
	r := overload.Reading{Version: overload.ReadingVersion, Run: "run-1", Seq: 1, Node: "de-1", At: t0, MemoryUsedPercent: 40, Load15: 0.5, CPUs: 4,
		ConntrackEntries: 10, ConntrackMax: 1000}
	if _, err := tr.Observe(r); err != nil {
		t.Fatal(err)
	}
	ended := t0.Add(-5 * time.Minute)
	n := routing.Node{ID: "de-1", Role: routing.RoleExit, Country: "DE", OverloadEnded: ended}
	n.SetOverload(tr, r)
	if !n.OverloadEnded.Equal(ended) || n.Overloaded() {
		t.Fatalf("after a tracker with no events: ended %v, overloaded %v; want ended %v, not overloaded", n.OverloadEnded, n.Overloaded(), ended)
	}
	if ok, why := admit(t, routing.Policy{}, n, t0); ok || why != routing.ReasonCoolDown {
		t.Errorf("Admit = %v, %q five minutes after the stored end; want the cool-down", ok, why)
	}
}
