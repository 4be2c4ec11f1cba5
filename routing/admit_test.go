package routing_test

import (
	"slices"
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
			ok, why := tc.pol.Admit(n, now)
			if ok != tc.ok || why != tc.why {
				t.Errorf("Admit = %v, %q (%v); want %v, %q", ok, why, why, tc.ok, tc.why)
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
	if ok, why := pol.Admit(n, t0); ok || why != routing.ReasonPaused {
		t.Fatalf("paused node: %v %q", ok, why)
	}
	n.Paused = false
	if ok, why := pol.Admit(n, t0); ok || why != routing.ReasonFull {
		t.Fatalf("full node: %v %q", ok, why)
	}
	n.LiveUsers = 1
	if ok, why := pol.Admit(n, t0); !ok {
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
	if ok, why := (routing.Policy{}).Admit(*n, t0); ok || why != routing.ReasonFull {
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
		if ok, why := (routing.Policy{}).Admit(*f.nodes[0], t0.Add(time.Minute)); ok || why != routing.ReasonOverloaded {
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
