package routing_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/routing"
)

func TestAdmit(t *testing.T) {
	now := t0
	base := routing.Node{ID: "n", Role: routing.RoleExit, Country: "DE", MaxUsers: 100, LiveUsers: 10}
	for _, tc := range []struct {
		name string
		pol  routing.Policy
		edit func(n *routing.Node)
		ok   bool
		why  routing.Reason
	}{
		{"healthy", routing.Policy{}, func(n *routing.Node) {}, true, ""},
		{"overloaded", routing.Policy{}, func(n *routing.Node) { n.OverloadedSince = now.Add(-time.Minute) }, false, routing.ReasonOverloaded},
		{"overloaded this instant", routing.Policy{}, func(n *routing.Node) { n.OverloadedSince = now }, false, routing.ReasonOverloaded},
		{"paused", routing.Policy{}, func(n *routing.Node) { n.Paused = true }, false, routing.ReasonPaused},
		{"paused and overloaded", routing.Policy{}, func(n *routing.Node) { n.Paused, n.OverloadedSince = true, now }, false, routing.ReasonPaused},
		{"overload ended 9m59s ago", routing.Policy{}, func(n *routing.Node) { n.OverloadEnded = now.Add(-10*time.Minute + time.Second) }, false, routing.ReasonCoolDown},
		{"overload ended 10m ago", routing.Policy{}, func(n *routing.Node) { n.OverloadEnded = now.Add(-10 * time.Minute) }, true, ""},
		{"overload ended 2m ago, cool-down 1m", routing.Policy{CoolDown: time.Minute}, func(n *routing.Node) { n.OverloadEnded = now.Add(-2 * time.Minute) }, true, ""},
		{"overload ended 30s ago, cool-down 1m", routing.Policy{CoolDown: time.Minute}, func(n *routing.Node) { n.OverloadEnded = now.Add(-30 * time.Second) }, false, routing.ReasonCoolDown},
		{"overload ended 1s ago, no cool-down", routing.Policy{CoolDown: -1}, func(n *routing.Node) { n.OverloadEnded = now.Add(-time.Second) }, true, ""},
		{"overloaded again during a cool-down", routing.Policy{}, func(n *routing.Node) {
			n.OverloadEnded, n.OverloadedSince = now.Add(-3*time.Minute), now.Add(-time.Minute)
		}, false, routing.ReasonOverloaded},
		// The clock stepped back past the overload's end or start: the
		// cool-down lasts longer, never shorter, and an overload holds.
		{"overload ended 5m ahead of the clock", routing.Policy{}, func(n *routing.Node) { n.OverloadEnded = now.Add(5 * time.Minute) }, false, routing.ReasonCoolDown},
		{"overloaded since 1m ahead of the clock", routing.Policy{}, func(n *routing.Node) { n.OverloadedSince = now.Add(time.Minute) }, false, routing.ReasonOverloaded},
		{"max_users filled", routing.Policy{}, func(n *routing.Node) { n.LiveUsers = 100 }, false, routing.ReasonFull},
		{"max_users overfilled", routing.Policy{}, func(n *routing.Node) { n.LiveUsers = 120 }, false, routing.ReasonFull},
		{"one place left", routing.Policy{}, func(n *routing.Node) { n.LiveUsers = 99 }, true, ""},
		{"no cap", routing.Policy{}, func(n *routing.Node) { n.MaxUsers, n.LiveUsers = 0, 5000 }, true, ""},
		{"full and cooling down", routing.Policy{}, func(n *routing.Node) { n.LiveUsers, n.OverloadEnded = 100, now.Add(-time.Minute) }, false, routing.ReasonCoolDown},
		{"full and overloaded", routing.Policy{}, func(n *routing.Node) { n.LiveUsers, n.OverloadedSince = 100, now }, false, routing.ReasonOverloaded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := base
			tc.edit(&n)
			ok, why, err := tc.pol.Admit(n, now)
			if err != nil || ok != tc.ok || why != tc.why {
				t.Errorf("Admit = %v, %q (%v), %v; want %v, %q", ok, why, why, err, tc.ok, tc.why)
			}
		})
	}
}

// "Routing comes back once the platform approves the node again": lifting
// a pause needs no cool-down. And a full node is offered again as soon as a
// user leaves: the cap is not an overload.
func TestAdmitAgain(t *testing.T) {
	var pol routing.Policy
	n := routing.Node{ID: "n", Role: routing.RoleEntry, Paused: true, MaxUsers: 2, LiveUsers: 2}
	if ok, why := admit(t, pol, n, t0); ok || why != routing.ReasonPaused {
		t.Fatalf("paused node: %v %q", ok, why)
	}
	n.Paused = false
	if ok, why := admit(t, pol, n, t0); ok || why != routing.ReasonFull {
		t.Fatalf("full node: %v %q", ok, why)
	}
	n.LiveUsers = 1
	if ok, why := admit(t, pol, n, t0); !ok {
		t.Fatalf("a user left, pause lifted this instant: refused (%q)", why)
	}
}

// A full node is not an overload: Plan closes nothing on it, and lowering
// max_users "does not unload a node either".
func TestFullNodeIsNotAnOverload(t *testing.T) {
	f := overloadedScenario(routing.RoleExit)
	n := f.nodes[0]
	n.OverloadedSince, n.MaxUsers, n.LiveUsers = time.Time{}, 10, 200
	f.run(t, routing.Policy{}, time.Minute, 3*time.Hour)
	if a := f.actions("de-1"); len(a) != 0 {
		t.Errorf("a full node lost %d routes, e.g. %v", len(a), a[0])
	}
	if ok, why := admit(t, routing.Policy{}, *n, t0); ok || why != routing.ReasonFull {
		t.Errorf("Admit = %v, %q; want false, full", ok, why)
	}
}

func TestReasonsInWords(t *testing.T) {
	for _, r := range []routing.Reason{routing.ReasonPaused, routing.ReasonOverloaded, routing.ReasonCoolDown,
		routing.ReasonFull, routing.ReasonUnused, routing.ReasonDrain, routing.ReasonMove} {
		if s := r.String(); s == string(r) || len(s) < 15 {
			t.Errorf("reason %q in words: %q", string(r), s)
		}
	}
}

// "Raising max_users does not help here … and lowering it does not unload
// a node either": on an overloaded node max_users changes neither the
// admission nor a single plan.
func TestMaxUsersPlaysNoPartWhenOverloaded(t *testing.T) {
	var plans [][]string
	for _, max := range []int{1, 200, 1_000_000} {
		f := overloadedScenario(routing.RoleExit)
		f.nodes[0].MaxUsers = max
		if ok, why := admit(t, routing.Policy{}, *f.nodes[0], t0.Add(time.Minute)); ok || why != routing.ReasonOverloaded {
			t.Errorf("max_users %d: Admit = %v, %q; want overloaded", max, ok, why)
		}
		f.run(t, routing.Policy{}, time.Minute, time.Hour)
		var ids []string
		for _, a := range f.actions("de-1") {
			ids = append(ids, a.Route.ID)
		}
		plans = append(plans, ids)
	}
	for i := 1; i < len(plans); i++ {
		if !slices.Equal(plans[0], plans[i]) {
			t.Errorf("plans differ with max_users: %v against %v", plans[0], plans[i])
		}
	}
}

// TestOfferedAgain: the end of an overload plus the cool-down, the default
// when none is set, none when it is negative.
func TestOfferedAgain(t *testing.T) {
	ended := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		cd   time.Duration
		want time.Time
	}{
		{0, ended.Add(routing.DefaultCoolDown)},
		{time.Minute, ended.Add(time.Minute)},
		{-1, ended},
	} {
		if got := (routing.Policy{CoolDown: tc.cd}).OfferedAgain(ended); !got.Equal(tc.want) {
			t.Errorf("CoolDown %v: OfferedAgain = %v, want %v", tc.cd, got, tc.want)
		}
	}
}

// admit is Admit for a node the test knows to be valid.
func admit(t *testing.T, pol routing.Policy, n routing.Node, now time.Time) (bool, routing.Reason) {
	t.Helper()
	ok, why, err := pol.Admit(n, now)
	if err != nil {
		t.Fatalf("Admit(%+v): %v", n, err)
	}
	return ok, why
}

// A node that cannot be true is an error naming the field, from Admit and
// Plan alike, never a verdict.
func TestNodeValidate(t *testing.T) {
	base := routing.Node{ID: "n", Role: routing.RoleExit, Country: "DE", MaxUsers: 10, LiveUsers: 3,
		State: routing.NodeState{PlannedAt: t0}}
	for _, tc := range []struct {
		name, field string
		edit        func(n *routing.Node)
	}{
		{"zero node", "ID", func(n *routing.Node) { *n = routing.Node{} }},
		{"no ID", "ID", func(n *routing.Node) { n.ID = "" }},
		{"no role", "Role", func(n *routing.Node) { n.Role = 0 }},
		{"role 7", "Role", func(n *routing.Node) { n.Role = 7 }},
		{"memory NaN", "MemoryPercent", func(n *routing.Node) { n.MemoryPercent = math.NaN() }},
		{"memory -1", "MemoryPercent", func(n *routing.Node) { n.MemoryPercent = -1 }},
		{"memory 101", "MemoryPercent", func(n *routing.Node) { n.MemoryPercent = 101 }},
		{"negative MaxUsers", "MaxUsers", func(n *routing.Node) { n.MaxUsers = -1 }},
		{"negative LiveUsers", "LiveUsers", func(n *routing.Node) { n.LiveUsers = -5 }},
		{"negative Sessions", "Sessions", func(n *routing.Node) { n.Sessions = -1 }},
		{"last move in 2126", "State.LastMove", func(n *routing.Node) { n.State.LastMove = t0.AddDate(100, 0, 0) }},
		{"last move without a plan", "State.LastMove", func(n *routing.Node) { n.State = routing.NodeState{LastMove: t0} }},
		{"negative period", "State.Period", func(n *routing.Node) { n.State.Period = -time.Second }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := base
			tc.edit(&n)
			err := n.Validate()
			if !errors.Is(err, routing.ErrInvalid) || !strings.Contains(err.Error(), " "+tc.field+" ") {
				t.Fatalf("Validate = %v, want ErrInvalid naming %s", err, tc.field)
			}
			if ok, why, err := (routing.Policy{}).Admit(n, t0.Add(time.Hour)); ok || why != "" || !errors.Is(err, routing.ErrInvalid) {
				t.Errorf("Admit = %v, %q, %v; want false, no reason, ErrInvalid", ok, why, err)
			}
			if _, err := (routing.Policy{}).Plan(t0.Add(time.Hour), n, nil, nil); !errors.Is(err, routing.ErrInvalid) {
				t.Errorf("Plan: err = %v, want ErrInvalid", err)
			}
			t.Log(err)
		})
	}
	if err := base.Validate(); err != nil {
		t.Errorf("a valid node: %v", err)
	}
	// The list of recent closures an earlier version stored is ignored,
	// whatever it holds, and a plan returns it empty.
	old := base
	old.State.UnusedRecent = []routing.Closures{{At: t0.Add(time.Second), Count: 0}}
	if err := old.Validate(); err != nil {
		t.Errorf("a state with an earlier version's recent closures: %v", err)
	}
	if p, err := (routing.Policy{}).Plan(t0.Add(time.Hour), old, nil, nil); err != nil || p.State.UnusedRecent != nil {
		t.Errorf("Plan over an earlier version's recent closures: state %+v, err %v; want them dropped", p.State, err)
	}
}

func TestPolicyWithDefaults(t *testing.T) {
	want := routing.Policy{
		UnusedAfter: routing.DefaultUnusedAfter, UnusedPerHour: routing.DefaultUnusedPerHour,
		MoveAfter: routing.DefaultMoveAfter, MoveMemoryPercent: routing.DefaultMoveMemoryPercent,
		MoveEvery: routing.DefaultMoveEvery, CoolDown: routing.DefaultCoolDown,
	}
	if got := (routing.Policy{}).WithDefaults(); got != want {
		t.Errorf("zero Policy with defaults: %+v, want %+v", got, want)
	}
	set := routing.Policy{UnusedAfter: time.Hour, UnusedPerHour: 0.5, MoveAfter: time.Minute,
		MoveMemoryPercent: 90, MoveEvery: time.Second, CoolDown: -1}
	if got := set.WithDefaults(); got != set {
		t.Errorf("a Policy with every field set: %+v, want it unchanged", got)
	}
	ended := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, p := range []routing.Policy{{}, {CoolDown: time.Minute}} {
		if got, want := p.OfferedAgain(ended), ended.Add(p.WithDefaults().CoolDown); !got.Equal(want) {
			t.Errorf("%+v: OfferedAgain %v, but WithDefaults' CoolDown gives %v", p, got, want)
		}
	}
}
