package routing_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/routing"
)

func TestScenarioHasTwoHundredSessions(t *testing.T) {
	f := overloadedScenario(routing.RoleExit)
	if got := len(f.live("de-1")); got != 200 {
		t.Fatalf("de-1 carries %d sessions, want 200", got)
	}
}

// checkMoves checks every move on node in the log: a valid alternative,
// live when the move was planned, not before MoveAfter of overload (unless
// paused), at least MoveEvery apart, at most max in all.
func checkMoves(t *testing.T, f *fleet, node string, paused bool, max int) int {
	t.Helper()
	var moves int
	var last time.Time
	for _, s := range f.log {
		if s.node.ID != node {
			continue
		}
		k := 0
		for _, a := range s.plan.Actions {
			if a.Reason != routing.ReasonMove {
				continue
			}
			moves++
			if !routing.IsAlternative(a.Route, a.Keeps) {
				t.Errorf("%v: moved %s without an alternative (keeps %+v)", s.at.Sub(t0), a.Route.ID, a.Keeps)
			}
			if !s.liveAlt[k] {
				t.Errorf("%v: moved %s onto %s, which was closed", s.at.Sub(t0), a.Route.ID, a.Keeps.ID)
			}
			k++
			if !paused && s.at.Sub(s.node.OverloadedSince) < 15*time.Minute {
				t.Errorf("%v: moved %s before the overload lasted 15 minutes", s.at.Sub(t0), a.Route.ID)
			}
			if s.node.MemoryPercent <= 80 {
				t.Errorf("%v: moved %s with memory at %v %%", s.at.Sub(t0), a.Route.ID, s.node.MemoryPercent)
			}
			if !last.IsZero() && s.at.Sub(last) < 5*time.Minute {
				t.Errorf("%v: moved %s only %v after the previous move", s.at.Sub(t0), a.Route.ID, s.at.Sub(last))
			}
			last = s.at
			if !strings.HasPrefix(a.Route.ID, "ok-") && !(paused && strings.HasPrefix(a.Route.ID, "partner-ok-")) {
				t.Errorf("%v: moved %s, which has no valid alternative", s.at.Sub(t0), a.Route.ID)
			}
		}
		if k > 1 {
			t.Errorf("%v: %d routes in use closed in one plan", s.at.Sub(t0), k)
		}
	}
	if moves > max {
		t.Errorf("%d routes in use closed, want at most %d", moves, max)
	}
	return moves
}

// The simulation: an overloaded exit with 200 sessions, a plan
// every 30 s for an hour.
func TestOverloadedExitHour(t *testing.T) {
	f := overloadedScenario(routing.RoleExit)
	f.run(t, routing.Policy{}, 30*time.Second, time.Hour)

	var unused []routing.Action
	for _, a := range f.actions("de-1") {
		switch {
		case a.Reason == routing.ReasonUnused:
			unused = append(unused, a)
			if a.Route.Kind != routing.KindOwn {
				t.Errorf("closed %s route %s", a.Route.Kind, a.Route.ID)
			}
			if a.SinceTraffic < 2*time.Hour {
				t.Errorf("closed %s as unused after %v", a.Route.ID, a.SinceTraffic)
			}
		case a.Route.Kind != routing.KindOwn:
			t.Errorf("closed %s route %s (%s)", a.Route.Kind, a.Route.ID, a.Reason)
		}
		if strings.HasPrefix(a.Route.ID, "only-") {
			t.Errorf("closed %s, its user's only route", a.Route.ID)
		}
	}
	if n := len(unused); n < 9 || n > 11 {
		t.Errorf("%d unused routes closed in an hour, want 10 ± 1 (5 %% of 200)", n)
	}
	// Longest unused first: unused-59 has been unused longest.
	for i, a := range unused {
		if want := fmt.Sprintf("unused-%02d", 59-i); a.Route.ID != want {
			t.Errorf("unused closure %d is %s, want %s (longest unused first)", i, a.Route.ID, want)
		}
	}
	moves := checkMoves(t, f, "de-1", false, 12)
	// 15, 20, …, 60 minutes.
	if moves != 10 {
		t.Errorf("%d routes in use moved, want 10 (one per 5 min from the 15th minute to the 60th)", moves)
	}
	t.Logf("unused closed %d, moved %d", len(unused), moves)
}

func TestOverloadedEntryHourClosesNothingUnused(t *testing.T) {
	f := overloadedScenario(routing.RoleEntry)
	f.run(t, routing.Policy{}, 30*time.Second, time.Hour)
	for _, a := range f.actions("de-1") {
		if a.Reason != routing.ReasonMove {
			t.Errorf("entry closed %s: %v", a.Route.ID, a)
		}
	}
	if moves := checkMoves(t, f, "de-1", false, 12); moves != 10 {
		t.Errorf("entry moved %d routes in use, want 10", moves)
	}
}

func TestPausedNodeDrainsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		role   routing.Role
		memory float64
		moves  int
	}{
		{"exit, memory 60 %", routing.RoleExit, 60, 0},
		{"entry, memory 60 %", routing.RoleEntry, 60, 0},
		{"exit, memory 80 %", routing.RoleExit, 80, 0},
		// Above 80 %: moved "the same way", from the first plan (no
		// overload to wait 15 minutes for), one per 5 minutes: 0, 5, …, 30.
		{"exit, memory 85 %", routing.RoleExit, 85, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := overloadedScenario(tc.role)
			n := f.nodes[0]
			n.Paused, n.OverloadedSince, n.MemoryPercent = true, time.Time{}, tc.memory
			f.run(t, routing.Policy{}, 30*time.Second, 30*time.Minute)
			first := f.log[0].plan.Actions
			drained := map[routing.Kind]int{}
			for _, a := range first {
				if a.Reason == routing.ReasonDrain {
					drained[a.Route.Kind]++
				}
			}
			if drained[routing.KindOwn] != 60 || drained[routing.KindPartner] != 20 || drained[routing.KindExtraLink] != 20 {
				t.Errorf("first plan drained %v, want every unused route: 60 own, 20 partner, 20 extra-link", drained)
			}
			for i := 1; i < len(first); i++ {
				if first[i].Reason == routing.ReasonDrain && first[i].SinceTraffic > first[i-1].SinceTraffic {
					t.Errorf("drain order: %s (%v) after %s (%v)", first[i].Route.ID, first[i].SinceTraffic, first[i-1].Route.ID, first[i-1].SinceTraffic)
				}
			}
			if got := f.count("de-1", routing.ReasonDrain); got != 100 {
				t.Errorf("%d routes drained in all, want 100", got)
			}
			if got := f.count("de-1", routing.ReasonUnused); got != 0 {
				t.Errorf("%d closed under the overload rule on a paused node", got)
			}
			if moves := checkMoves(t, f, "de-1", true, 7); moves != tc.moves {
				t.Errorf("%d moves, want %d", moves, tc.moves)
			}
			for _, a := range f.actions("de-1") {
				if strings.HasPrefix(a.Route.ID, "only-") {
					t.Errorf("closed %s, its user's only route, in use", a.Route.ID)
				}
			}
		})
	}
}

// Budgets carry over: planning every second closes no more than planning
// every 5 minutes, and neither exceeds the rates.
func TestPlanFrequencyDoesNotRaiseClosures(t *testing.T) {
	counts := map[time.Duration][2]int{}
	for _, every := range []time.Duration{time.Second, 30 * time.Second, 5 * time.Minute, time.Hour} {
		f := overloadedScenario(routing.RoleExit)
		f.run(t, routing.Policy{}, every, time.Hour)
		counts[every] = [2]int{f.count("de-1", routing.ReasonUnused), f.count("de-1", routing.ReasonMove)}
		checkMoves(t, f, "de-1", false, 12)
	}
	t.Logf("unused, moved by plan interval: %v", counts)
	fast, slow := counts[time.Second], counts[5*time.Minute]
	if fast[0] > slow[0] || fast[1] > slow[1] {
		t.Errorf("every second: %v closures; every 5 minutes: %v; want no more", fast, slow)
	}
	for every, c := range counts {
		if c[0] > 11 {
			t.Errorf("every %v: %d unused closed in an hour, above 5 %% of 200 (+1)", every, c[0])
		}
	}
}

// The state survives being stored as JSON between every round.
func TestStateRoundTripsThroughJSON(t *testing.T) {
	direct := overloadedScenario(routing.RoleExit)
	direct.run(t, routing.Policy{}, 30*time.Second, time.Hour)

	stored := overloadedScenario(routing.RoleExit)
	for at := t0; !at.After(t0.Add(time.Hour)); at = at.Add(30 * time.Second) {
		b, err := json.Marshal(stored.nodes[0])
		if err != nil {
			t.Fatal(err)
		}
		var n routing.Node
		if err := json.Unmarshal(b, &n); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		stored.nodes[0] = &n
		stored.round(t, routing.Policy{}, at)
	}
	a, b := direct.actions("de-1"), stored.actions("de-1")
	if len(a) != len(b) {
		t.Fatalf("%d actions planned directly, %d through JSON", len(a), len(b))
	}
	for i := range a {
		if a[i].Route.ID != b[i].Route.ID || a[i].Reason != b[i].Reason {
			t.Errorf("action %d: %v directly, %v through JSON", i, a[i], b[i])
		}
	}
}
