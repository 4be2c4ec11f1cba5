package routing_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/routing"
)

func exitNode(overloadedFor time.Duration, memory float64) routing.Node {
	n := routing.Node{ID: "de-1", Role: routing.RoleExit, Country: "DE", Price: 100, MemoryPercent: memory}
	if overloadedFor >= 0 {
		n.OverloadedSince = t0.Add(-overloadedFor)
	}
	return n
}

func ids(p routing.Plan) []string {
	var out []string
	for _, a := range p.Actions {
		out = append(out, a.Route.ID+":"+string(a.Reason))
	}
	return out
}

func mustPlan(t *testing.T, pol routing.Policy, now time.Time, n routing.Node, routes []routing.Route, alts routing.Alternatives) routing.Plan {
	t.Helper()
	p, err := pol.Plan(now, n, routes, alts)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	return p
}

// The unused rule's edges, one route at a time, on a fresh exit overloaded
// for a minute (the first unused route goes at once).
func TestUnusedRule(t *testing.T) {
	for _, tc := range []struct {
		name   string
		role   routing.Role
		kind   routing.Kind
		last   time.Duration // before t0; 0: never moved traffic
		start  time.Duration // before t0
		closed bool
	}{
		{"own, unused 2h", routing.RoleExit, routing.KindOwn, 2 * time.Hour, 3 * time.Hour, true},
		{"own, unused 1h59m59s", routing.RoleExit, routing.KindOwn, 2*time.Hour - time.Second, 3 * time.Hour, false},
		{"own, never moved traffic, started 2h ago", routing.RoleExit, routing.KindOwn, 0, 2 * time.Hour, true},
		{"own, never moved traffic, started 1h ago", routing.RoleExit, routing.KindOwn, 0, time.Hour, false},
		{"own, traffic a minute ago", routing.RoleExit, routing.KindOwn, time.Minute, 3 * time.Hour, false},
		{"partner, unused 5h", routing.RoleExit, routing.KindPartner, 5 * time.Hour, 6 * time.Hour, false},
		{"extra link, unused 5h", routing.RoleExit, routing.KindExtraLink, 5 * time.Hour, 6 * time.Hour, false},
		{"own on an entry, unused 5h", routing.RoleEntry, routing.KindOwn, 5 * time.Hour, 6 * time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := exitNode(time.Minute, 95)
			n.Role = tc.role
			r := routing.Route{ID: "r", User: "u", Key: "k", Node: n.ID, Country: "DE", Price: 100, Kind: tc.kind, Start: t0.Add(-tc.start)}
			if tc.last > 0 {
				r.LastTraffic = t0.Add(-tc.last)
			}
			p := mustPlan(t, routing.Policy{}, t0, n, []routing.Route{r}, nil)
			if got := len(p.Actions) == 1; got != tc.closed {
				t.Fatalf("closed = %v (%v), want %v", got, ids(p), tc.closed)
			}
			if tc.closed {
				want := tc.last
				if want == 0 {
					want = tc.start
				}
				if a := p.Actions[0]; a.Reason != routing.ReasonUnused || a.SinceTraffic != want {
					t.Errorf("action %+v, want reason unused, %v since traffic", a, want)
				}
			}
		})
	}
}

// Nothing is closed on a node that is neither overloaded nor paused, at any
// memory, however unused its routes and whatever alternatives its users
// hold.
func TestHealthyNodeLosesNothing(t *testing.T) {
	f := overloadedScenario(routing.RoleExit)
	f.nodes[0].OverloadedSince = time.Time{}
	f.nodes[0].MemoryPercent = 99
	f.run(t, routing.Policy{}, time.Minute, 2*time.Hour)
	if a := f.actions("de-1"); len(a) != 0 {
		t.Errorf("%d routes closed on a healthy node, e.g. %v", len(a), a[0])
	}
}

// The move rule's conditions, each alone: the overload's age, memory, and
// each part of "the same route through another node of the same country,
// at the same price or less".
func TestMoveRule(t *testing.T) {
	busy := routing.Route{ID: "busy", User: "u", Key: "vpn-de", Node: "de-1", Country: "DE", Price: 100,
		Kind: routing.KindOwn, LastTraffic: t0.Add(-time.Minute), Start: t0.Add(-time.Hour)}
	alt := routing.Route{ID: "alt", User: "u", Key: "vpn-de", Node: "de-2", Country: "DE", Price: 100,
		Kind: routing.KindOwn, LastTraffic: t0, Start: t0.Add(-time.Hour)}
	for _, tc := range []struct {
		name       string
		overloaded time.Duration // -1: not overloaded
		memory     float64
		paused     bool
		edit       func(busy, alt *routing.Route)
		moved      bool
	}{
		{"15 min, 81 %, same price", 15 * time.Minute, 81, false, nil, true},
		{"14m59s", 15*time.Minute - time.Second, 81, false, nil, false},
		{"memory at 80 %", time.Hour, 80, false, nil, false},
		{"memory at 80.01 %", time.Hour, 80.01, false, nil, true},
		{"cheaper elsewhere", time.Hour, 90, false, func(b, a *routing.Route) { a.Price = 99 }, true},
		{"dearer elsewhere", time.Hour, 90, false, func(b, a *routing.Route) { a.Price = 101 }, false},
		{"other country", time.Hour, 90, false, func(b, a *routing.Route) { a.Country = "FR" }, false},
		{"same node", time.Hour, 90, false, func(b, a *routing.Route) { a.Node = "de-1" }, false},
		{"other route key", time.Hour, 90, false, func(b, a *routing.Route) { a.Key = "vpn-nl" }, false},
		{"other user", time.Hour, 90, false, func(b, a *routing.Route) { a.User = "v" }, false},
		{"alternative unused itself", time.Hour, 90, false, func(b, a *routing.Route) { a.LastTraffic = t0.Add(-5 * time.Hour) }, true},
		{"partner route, overloaded", time.Hour, 90, false, func(b, a *routing.Route) { b.Kind = routing.KindPartner }, false},
		{"extra link, overloaded", time.Hour, 90, false, func(b, a *routing.Route) { b.Kind = routing.KindExtraLink }, false},
		{"partner route, paused", -1, 90, true, func(b, a *routing.Route) { b.Kind = routing.KindPartner }, true},
		{"paused, not overloaded, 81 %", -1, 81, true, nil, true},
		{"paused, not overloaded, 80 %", -1, 80, true, nil, false},
		{"paused, overloaded 1 min, 81 %", time.Minute, 81, true, nil, true},
		{"entry, 15 min, 81 %", 15 * time.Minute, 81, false, nil, true},
		{"not overloaded, 99 %", -1, 99, false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, a := busy, alt
			if tc.edit != nil {
				tc.edit(&b, &a)
			}
			n := exitNode(tc.overloaded, tc.memory)
			n.Paused = tc.paused
			if tc.name[:5] == "entry" {
				n.Role = routing.RoleEntry
			}
			p := mustPlan(t, routing.Policy{}, t0, n, []routing.Route{b}, routing.NewIndex([]routing.Route{b, a}))
			if got := len(p.Actions) == 1; got != tc.moved {
				t.Fatalf("moved = %v (%v), want %v", got, ids(p), tc.moved)
			}
			if tc.moved {
				act := p.Actions[0]
				if act.Reason != routing.ReasonMove || act.Keeps.ID != "alt" || act.SinceTraffic != time.Minute {
					t.Errorf("action %+v", act)
				}
			}
		})
	}
}

// One route in use per 5 minutes, whatever the number of plans; the one
// that moved traffic least recently first.
func TestMoveEveryFiveMinutes(t *testing.T) {
	var routes, all []routing.Route
	for i, last := range []time.Duration{time.Minute, 30 * time.Minute, 10 * time.Minute, time.Hour + 59*time.Minute} {
		r := routing.Route{ID: string(rune('a' + i)), User: string(rune('a' + i)), Key: "k", Node: "de-1", Country: "DE",
			Price: 10, Kind: routing.KindOwn, LastTraffic: t0.Add(-last), Start: t0.Add(-3 * time.Hour)}
		routes = append(routes, r)
		all = append(all, r, routing.Route{ID: r.ID + "-alt", User: r.User, Key: "k", Node: "de-2", Country: "DE",
			Price: 10, Kind: routing.KindOwn, Start: t0})
	}
	ix := routing.NewIndex(all)
	n := exitNode(time.Hour, 90)
	var order []string
	var at []time.Duration
	for now := t0; now.Before(t0.Add(16 * time.Minute)); now = now.Add(10 * time.Second) {
		p := mustPlan(t, routing.Policy{}, now, n, routes, ix)
		n.State = p.State
		for _, a := range p.Actions {
			order = append(order, a.Route.ID)
			at = append(at, now.Sub(t0))
			ix.Remove(a.Route)
			routes = slices.DeleteFunc(routes, func(r routing.Route) bool { return r.ID == a.Route.ID })
		}
	}
	// Least recent traffic first: d (1h59m), b (30m), c (10m), a (1m).
	if want := []string{"d", "b", "c", "a"}; !slices.Equal(order, want) {
		t.Errorf("moved %v, want %v", order, want)
	}
	if want := []time.Duration{0, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute}; !slices.Equal(at, want) {
		t.Errorf("moved at %v, want %v", at, want)
	}
}

// A route in use that is its user's only route is never closed, and two
// nodes that each hold one of a user's two routes do not both close theirs
// when the platform records each plan's closures before the next plan.
func TestOnlyRouteIsKept(t *testing.T) {
	f := newFleet()
	for _, id := range []string{"de-1", "de-2"} {
		f.nodes = append(f.nodes, &routing.Node{ID: id, Role: routing.RoleExit, Country: "DE",
			OverloadedSince: t0.Add(-time.Hour), MemoryPercent: 95})
	}
	f.add(route("a1", "alice", "k", "de-1", "DE", 10, routing.KindOwn, t0), true)
	f.add(route("a2", "alice", "k", "de-2", "DE", 10, routing.KindOwn, t0), true)
	f.add(route("b1", "bob", "k", "de-1", "DE", 10, routing.KindOwn, t0), true)
	f.build()
	f.run(t, routing.Policy{}, 30*time.Second, 2*time.Hour)
	if a := f.actions("de-1"); len(a) != 1 || a[0].Route.ID != "a1" {
		t.Errorf("de-1 closed %v, want alice's a1 only", a)
	}
	if a := f.actions("de-2"); len(a) != 0 {
		t.Errorf("de-2 closed %v, alice's last route", a)
	}
}

// An idle route that is its user's only route is closed on an overloaded
// exit: the help page names no exception for unused routes (see the package
// doc).
func TestUnusedOnlyRouteIsClosed(t *testing.T) {
	r := route("r", "u", "k", "de-1", "DE", 10, routing.KindOwn, t0.Add(-3*time.Hour))
	p := mustPlan(t, routing.Policy{}, t0, exitNode(0, 50), []routing.Route{r}, routing.NewIndex([]routing.Route{r}))
	if got := ids(p); !slices.Equal(got, []string{"r:unused"}) {
		t.Errorf("plan %v, want r:unused", got)
	}
}

// unusedRoutes returns n own routes of n users, last used at last, each a
// second before the previous.
func unusedRoutes(n int, node string, last time.Time) []routing.Route {
	var rs []routing.Route
	for i := range n {
		id := fmt.Sprintf("%s-%04d", node, i)
		rs = append(rs, route(id, "u-"+id, "k", node, "DE", 10, routing.KindOwn, last.Add(-time.Duration(i)*time.Second)))
	}
	return rs
}

// closedPerWindow returns the most closures that any span of length d held
// (half-open, starting at a closure), given the closures by plan time.
func closedPerWindow(at []time.Time, count []int, d time.Duration) int {
	most := 0
	for i := range at {
		n := 0
		for j := i; j < len(at) && at[j].Before(at[i].Add(d)); j++ {
			n += count[j]
		}
		most = max(most, n)
	}
	return most
}

// The help page's case: an exit with 1,000 sessions, overloaded for three
// hours with every route in use, whose routes then cross two hours unused
// together. The old bucket, full after the quiet hours, closed 49 in one
// round and 96 within the hour; a few at a time is at most what a plan's
// period earns, plus one (2 planned every 5 s, 9 every 10 minutes), at
// most 6 in any 5 minutes when plans come more often, and about 50 in the
// hour at every period. A second overload, after one that had nothing to
// close, starts with one.
func TestUnusedPaceAfterQuietHours(t *testing.T) {
	for _, every := range []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute, 10 * time.Minute} {
		t.Run(every.String(), func(t *testing.T) {
			n := exitNode(0, 50)
			routes := unusedRoutes(1000, "de-1", t0)
			plan := func(now time.Time, last time.Time) routing.Plan {
				for i := range routes {
					routes[i].LastTraffic = last
				}
				p := mustPlan(t, routing.Policy{}, now, n, routes, nil)
				n.State = p.State
				return p
			}
			for now := t0; now.Before(t0.Add(3 * time.Hour)); now = now.Add(every) {
				if p := plan(now, now); len(p.Actions) != 0 {
					t.Fatalf("closed %v with nothing unused", ids(p))
				}
			}
			// From 3h on, every route has been unused for two hours.
			var at []time.Time
			var count []int
			start := t0.Add(3 * time.Hour)
			for now := start; now.Before(start.Add(time.Hour)); now = now.Add(every) {
				p := plan(now, now.Add(-2*time.Hour))
				if len(p.Actions) > 0 {
					at, count = append(at, now), append(count, len(p.Actions))
				}
				// Closed routes leave; new users take their place, so
				// the node keeps its 1,000 sessions.
				for _, a := range p.Actions {
					i := slices.IndexFunc(routes, func(r routing.Route) bool { return r.ID == a.Route.ID })
					routes[i].ID += "+"
				}
			}
			// 50 an hour: one every 72 s. No plan closes more than its
			// period earns, plus one; no 5 minutes more than 6.
			perPlan := 1 + int(every/(72*time.Second))
			if len(count) == 0 || count[0] > perPlan {
				t.Errorf("first round closed %v, want at most %d", count, perPlan)
			}
			if most := slices.Max(count); most > perPlan {
				t.Errorf("one plan closed %d, want at most %d", most, perPlan)
			}
			if most := closedPerWindow(at, count, 5*time.Minute); most > max(6, perPlan) {
				t.Errorf("%d closed within 5 minutes, want at most %d", most, max(6, perPlan))
			}
			total := 0
			for _, c := range count {
				total += c
			}
			lo, hi := 44, 56
			if total < lo || total > hi {
				t.Errorf("%d closed in the hour, want %d to %d", total, lo, hi)
			}
			t.Logf("every %v: first round %d, hour %d, most in 5 minutes %d", every, count[0], total, closedPerWindow(at, count, 5*time.Minute))

			// The overload ends, and another starts an hour later.
			end := start.Add(time.Hour)
			n.OverloadedSince, n.OverloadEnded = time.Time{}, end
			plan(end, end.Add(-3*time.Hour))
			n.OverloadedSince = end.Add(time.Hour)
			if p := plan(n.OverloadedSince, end.Add(-3*time.Hour)); len(p.Actions) != 1 {
				t.Errorf("second overload's first round closed %d, want 1 as the first's", len(p.Actions))
			}
		})
	}
}

// The pace closes the longest unused routes first, however many are due.
func TestUnusedLongestFirst(t *testing.T) {
	for _, k := range []int{1, 3, 7, 20} {
		rs := unusedRoutes(400, "de-1", t0.Add(-3*time.Hour))
		slices.Reverse(rs) // oldest first in the input, to show the order is Plan's
		rs = append(rs[200:], rs[:200]...)
		n := exitNode(time.Hour, 50)
		// 4,800 sessions: 240 an hour, one every 15 s, 21 in 5 minutes.
		// Planned every 10 minutes, the last plan 10 minutes ago.
		n.Sessions = 4800
		n.State = routing.NodeState{PlannedAt: t0.Add(-10 * time.Minute), Period: 10 * time.Minute,
			UnusedDue: t0.Add(-time.Duration(k-1)*15*time.Second - 5*time.Second)}
		p := mustPlan(t, routing.Policy{}, t0, n, rs, nil)
		var want []string
		for i := range k {
			want = append(want, fmt.Sprintf("de-1-%04d:unused", 399-i))
		}
		if got := ids(p); !slices.Equal(got, want) {
			t.Errorf("%d due: closed %v, want %v", k, got, want)
		}
	}
}

// "About 5 % of the node's sessions": the sessions are Node.Sessions when
// set, so a platform that passes only some routes (here a tenth: the
// unused ones) closes as many as one that passes them all; without it the
// base is the routes given.
func TestSessionsIsTheBase(t *testing.T) {
	run := func(sessions int, routes []routing.Route) int {
		n := exitNode(0, 50)
		n.Sessions = sessions
		closed := 0
		for now := t0; now.Before(t0.Add(time.Hour)); now = now.Add(30 * time.Second) {
			p := mustPlan(t, routing.Policy{}, now, n, routes, nil)
			n.State = p.State
			closed += len(p.Actions)
		}
		return closed
	}
	var all []routing.Route
	for i := range 2000 {
		r := route(fmt.Sprintf("r%04d", i), fmt.Sprintf("u%04d", i), "k", "de-1", "DE", 10, routing.KindOwn, t0)
		if i%10 == 0 {
			r.LastTraffic = t0.Add(-3*time.Hour - time.Duration(i)*time.Second)
			r.Start = r.LastTraffic
		}
		all = append(all, r)
	}
	var unused []routing.Route
	for i := 0; i < len(all); i += 10 {
		unused = append(unused, all[i])
	}
	full, part, explicit := run(0, all), run(0, unused), run(2000, unused)
	if full < 90 || full > 110 || explicit != full {
		t.Errorf("closed %d of all 2,000 routes and %d of 200 with Sessions 2000; want the same, about 100", full, explicit)
	}
	if part < 9 || part > 11 {
		t.Errorf("closed %d of 200 routes given without Sessions, want about 10 (5 %% of 200)", part)
	}
	_, err := routing.Policy{}.Plan(t0, routing.Node{ID: "de-1", Role: routing.RoleExit, Sessions: 100}, all, nil)
	if !errors.Is(err, routing.ErrInvalid) {
		t.Errorf("Sessions 100 with 2,000 routes: err = %v, want ErrInvalid", err)
	}
}

// A stored state from the future: a last move in 2126 is refused; an
// UnusedDue far ahead is brought back to one interval after now.
func TestStateFromTheFuture(t *testing.T) {
	rs := unusedRoutes(200, "de-1", t0.Add(-3*time.Hour))
	n := exitNode(time.Hour, 50)
	n.State = routing.NodeState{PlannedAt: t0, LastMove: t0.AddDate(100, 0, 0)}
	if _, err := (routing.Policy{}).Plan(t0, n, rs, nil); !errors.Is(err, routing.ErrInvalid) {
		t.Errorf("last move in 2126: err = %v, want ErrInvalid", err)
	}
	// 200 sessions: 10 an hour, one every 6 minutes.
	n.State = routing.NodeState{PlannedAt: t0, UnusedDue: t0.AddDate(100, 0, 0)}
	closed := 0
	for now := t0; now.Before(t0.Add(time.Hour)); now = now.Add(30 * time.Second) {
		p := mustPlan(t, routing.Policy{}, now, n, rs, nil)
		n.State = p.State
		closed += len(p.Actions)
	}
	if closed < 9 || closed > 10 {
		t.Errorf("closed %d in the hour after a due time in 2126, want 9 or 10", closed)
	}
}

// A Policy changes the figures.
func TestPolicyFigures(t *testing.T) {
	pol := routing.Policy{UnusedAfter: time.Hour, UnusedPerHour: 0.5, MoveAfter: time.Minute, MoveMemoryPercent: 50, MoveEvery: time.Minute}
	rs := unusedRoutes(100, "de-1", t0.Add(-time.Hour))
	n := exitNode(0, 60)
	var closed int
	for now := t0; now.Before(t0.Add(time.Hour)); now = now.Add(time.Minute) {
		p := mustPlan(t, pol, now, n, rs, nil)
		n.State = p.State
		closed += len(p.Actions)
		for _, a := range p.Actions {
			rs = slices.DeleteFunc(rs, func(r routing.Route) bool { return r.ID == a.Route.ID })
		}
	}
	// 1 + 50 % of ~(100 → 70) sessions over an hour: about 40.
	if closed < 35 || closed > 45 {
		t.Errorf("closed %d in an hour at 50 %%/h of 100, want about 40", closed)
	}
}

func TestPlanRejects(t *testing.T) {
	good := route("r", "u", "k", "de-1", "DE", 10, routing.KindOwn, t0)
	for _, tc := range []struct {
		name  string
		pol   routing.Policy
		node  func(*routing.Node)
		route func(*routing.Route)
		want  error
	}{
		{"route of another node", routing.Policy{}, nil, func(r *routing.Route) { r.Node = "de-2" }, routing.ErrInvalid},
		{"route without ID", routing.Policy{}, nil, func(r *routing.Route) { r.ID = "" }, routing.ErrInvalid},
		{"route without user", routing.Policy{}, nil, func(r *routing.Route) { r.User = "" }, routing.ErrInvalid},
		{"route without kind", routing.Policy{}, nil, func(r *routing.Route) { r.Kind = 0 }, routing.ErrInvalid},
		{"route of kind 9", routing.Policy{}, nil, func(r *routing.Route) { r.Kind = 9 }, routing.ErrInvalid},
		{"route without start", routing.Policy{}, nil, func(r *routing.Route) { r.Start = time.Time{} }, routing.ErrInvalid},
		{"route starting in 3000", routing.Policy{}, nil, func(r *routing.Route) { r.Start = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }, routing.ErrInvalid},
		{"traffic in 1500", routing.Policy{}, nil, func(r *routing.Route) { r.LastTraffic = time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC) }, routing.ErrInvalid},
		{"node without ID", routing.Policy{}, func(n *routing.Node) { n.ID = "" }, nil, routing.ErrInvalid},
		{"node without role", routing.Policy{}, func(n *routing.Node) { n.Role = 0 }, nil, routing.ErrInvalid},
		{"memory NaN", routing.Policy{}, func(n *routing.Node) { n.MemoryPercent = math.NaN() }, nil, routing.ErrInvalid},
		{"memory 101", routing.Policy{}, func(n *routing.Node) { n.MemoryPercent = 101 }, nil, routing.ErrInvalid},
		{"fewer sessions than routes", routing.Policy{}, func(n *routing.Node) { n.Sessions = 0; n.Sessions--; n.Sessions += 1 }, nil, nil},
		{"plan before the last", routing.Policy{}, func(n *routing.Node) { n.State.PlannedAt = t0.Add(time.Second) }, nil, nil},
		{"negative UnusedAfter", routing.Policy{UnusedAfter: -1}, nil, nil, routing.ErrInvalid},
		{"negative MoveEvery", routing.Policy{MoveEvery: -1}, nil, nil, routing.ErrInvalid},
		{"negative MoveAfter", routing.Policy{MoveAfter: -1}, nil, nil, routing.ErrInvalid},
		{"share above 1", routing.Policy{UnusedPerHour: 1.5}, nil, nil, routing.ErrInvalid},
		{"share NaN", routing.Policy{UnusedPerHour: math.NaN()}, nil, nil, routing.ErrInvalid},
		{"memory mark 120", routing.Policy{MoveMemoryPercent: 120}, nil, nil, routing.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, r := exitNode(time.Hour, 90), good
			if tc.node != nil {
				tc.node(&n)
			}
			if tc.route != nil {
				tc.route(&r)
			}
			_, err := tc.pol.Plan(t0, n, []routing.Route{r}, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}
}

func TestPlanRejectsATimeOutOfRange(t *testing.T) {
	r := route("r", "u", "k", "de-1", "DE", 10, routing.KindOwn, t0)
	_, err := routing.Policy{}.Plan(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), exitNode(time.Hour, 90), []routing.Route{r}, nil)
	if !errors.Is(err, routing.ErrInvalid) {
		t.Errorf("plan in 2300: err = %v, want ErrInvalid", err)
	}
}

// lyingStore is a platform store that answers with a route that is not an
// alternative.
type lyingStore struct{ alt routing.Route }

func (s lyingStore) Alternative(routing.Route) (routing.Route, bool) { return s.alt, true }
func (lyingStore) Record(time.Time, routing.Action)                  {}
func (lyingStore) ReliedOn(routing.Route) time.Time                  { return time.Time{} }

func TestPlanRejectsAWrongAlternative(t *testing.T) {
	r := route("r", "u", "k", "de-1", "DE", 10, routing.KindOwn, t0)
	for name, alt := range map[string]routing.Route{
		"same node":     route("x", "u", "k", "de-1", "DE", 10, routing.KindOwn, t0),
		"dearer":        route("x", "u", "k", "de-2", "DE", 11, routing.KindOwn, t0),
		"other country": route("x", "u", "k", "fr-1", "FR", 10, routing.KindOwn, t0),
		"other user":    route("x", "v", "k", "de-2", "DE", 10, routing.KindOwn, t0),
		"other key":     route("x", "u", "j", "de-2", "DE", 10, routing.KindOwn, t0),
		"itself":        route("r", "u", "k", "de-2", "DE", 10, routing.KindOwn, t0),
	} {
		_, err := routing.Policy{}.Plan(t0, exitNode(time.Hour, 90), []routing.Route{r}, lyingStore{alt})
		if !errors.Is(err, routing.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

// Plan reads its routes and never writes them.
func TestPlanLeavesRoutesAlone(t *testing.T) {
	f := overloadedScenario(routing.RoleExit)
	f.nodes[0].Paused = true
	in := f.live("de-1")
	before := slices.Clone(in)
	mustPlan(t, routing.Policy{}, t0.Add(time.Hour), *f.nodes[0], in, f.ix)
	if !slices.Equal(in, before) {
		t.Error("Plan changed its routes")
	}
}

// Ann's case: x1 moves her route in use because she holds
// the same route on x2; x2, an overloaded exit where that copy has been
// unused for five hours, is planned next and must not close it, nor may a
// paused x2 drain it, for two hours after the move, though nothing but
// Plan told the store. A new Index carries it over with Rely.
func TestTheRouteAMoveKeepsStaysInUse(t *testing.T) {
	ann1 := route("ann-x1", "ann", "vpn", "x1", "DE", 100, routing.KindOwn, t0)
	ann2 := route("ann-x2", "ann", "vpn", "x2", "DE", 100, routing.KindOwn, t0.Add(-5*time.Hour))
	x1 := routing.Node{ID: "x1", Role: routing.RoleExit, Country: "DE", OverloadedSince: t0.Add(-time.Hour), MemoryPercent: 95}
	x2 := x1
	x2.ID = "x2"
	all := []routing.Route{ann1, ann2}
	ix := routing.NewIndex(all)
	p := mustPlan(t, routing.Policy{}, t0, x1, []routing.Route{ann1}, ix)
	if got := ids(p); !slices.Equal(got, []string{"ann-x1:move"}) || p.Actions[0].Keeps.ID != "ann-x2" {
		t.Fatalf("x1 planned %v, want ann-x1 moved onto ann-x2", got)
	}
	if at := ix.ReliedOn(ann2); !at.Equal(t0) {
		t.Fatalf("ReliedOn(ann-x2) = %v, want the move's time", at)
	}
	for _, tc := range []struct {
		name   string
		after  time.Duration
		paused bool
		closed bool
	}{
		{"overloaded, at once", 0, false, false},
		{"overloaded, 1h59m later", 2*time.Hour - time.Minute, false, false},
		{"paused, 1h later", time.Hour, true, false},
		{"overloaded, 2h later", 2 * time.Hour, false, true},
	} {
		n := x2
		n.Paused = tc.paused
		p := mustPlan(t, routing.Policy{}, t0.Add(tc.after), n, []routing.Route{ann2}, readOnly{ix})
		if got := len(p.Actions) == 1; got != tc.closed {
			t.Errorf("%s: x2 planned %v, closed %v, want %v", tc.name, ids(p), got, tc.closed)
		}
	}
	// Nor is it moved, though ann holds the route on x3 too and now sends
	// traffic through x2.
	busy2 := ann2
	busy2.LastTraffic = t0.Add(time.Minute)
	ann3 := route("ann-x3", "ann", "vpn", "x3", "DE", 100, routing.KindOwn, t0)
	three := routing.NewIndex([]routing.Route{ann1, busy2, ann3})
	three.Rely(busy2, t0)
	if p := mustPlan(t, routing.Policy{}, t0.Add(time.Minute), x2, []routing.Route{busy2}, three); len(p.Actions) != 0 {
		t.Errorf("x2 moved %v, the route a move relied on a minute before", ids(p))
	}
	// A new Index knows nothing of the move until told.
	fresh := routing.NewIndex(all)
	if p := mustPlan(t, routing.Policy{}, t0, x2, []routing.Route{ann2}, readOnly{fresh}); len(p.Actions) != 1 {
		t.Errorf("fresh index: x2 planned %v, want ann-x2 closed as unused", ids(p))
	}
	fresh.Rely(ann2, ix.ReliedOn(ann2))
	if p := mustPlan(t, routing.Policy{}, t0, x2, []routing.Route{ann2}, fresh); len(p.Actions) != 0 {
		t.Errorf("index told with Rely: x2 planned %v, want nothing closed", ids(p))
	}
}

// An action says how long its route was unused as a reader would, rounded
// down: to the minute from an hour on, with days from a day on, to the
// second below; never with nanoseconds ("766h19m31.154994666s").
func TestActionStringRoundsDurations(t *testing.T) {
	r := route("r17", "u3", "k", "de-1", "DE", 10, routing.KindOwn, t0)
	for _, tc := range []struct {
		since time.Duration
		why   routing.Reason
		want  string
	}{
		{766*time.Hour + 19*time.Minute + 31154994666, routing.ReasonUnused, "unused for 31d22h19m; unused own route on an overloaded exit"},
		{2 * time.Hour, routing.ReasonUnused, "unused for 2h0m; "},
		{2*time.Hour + 30*time.Minute + 29*time.Second, routing.ReasonDrain, "unused for 2h30m; unused route on a paused node"},
		{2*time.Hour + 30*time.Minute + 59*time.Second, routing.ReasonDrain, "unused for 2h30m; "},
		{24*time.Hour - time.Nanosecond, routing.ReasonDrain, "unused for 23h59m; "},
		{24 * time.Hour, routing.ReasonDrain, "unused for 1d0h0m; "},
		{48*time.Hour + 5*time.Minute, routing.ReasonDrain, "unused for 2d0h5m; "},
		{45*time.Minute + 10*time.Second + 400*time.Millisecond, routing.ReasonUnused, "unused for 45m10s; "},
		{1999 * time.Millisecond, routing.ReasonUnused, "unused for 1s; "},
		{-90 * time.Minute, routing.ReasonUnused, "unused for -1h30m; "},
		{math.MinInt64, routing.ReasonUnused, "unused for -106751d23h47m; "},
	} {
		a := routing.Action{Route: r, Reason: tc.why, SinceTraffic: tc.since}
		got := a.String()
		if want := "close route r17 of user u3: " + tc.want; !strings.HasPrefix(got, want) {
			t.Errorf("SinceTraffic %d ns: %q, want %q…", int64(tc.since), got, want)
		}
	}
	move := routing.Action{Route: r, Reason: routing.ReasonMove, SinceTraffic: time.Minute + time.Nanosecond,
		Keeps: route("r18", "u3", "k", "de-2", "DE", 9, routing.KindOwn, t0)}
	if got, want := move.String(), "close route r17 of user u3: in use; the user keeps route r18 through node de-2 (DE, price 9 against 10)"; got != want {
		t.Errorf("move: %q, want %q", got, want)
	}
}

// The Index's promises beyond the move rule itself: the cheapest
// alternative, the first indexed among equals, so a repeated plan moves
// the user onto the same route; a route relied on by two moves counts as
// in use from the later one, whatever the order they are recorded in (a
// clock that stepped back); a route removed is no longer relied on.
func TestIndexAnswers(t *testing.T) {
	r := route("r", "u", "k", "de-1", "DE", 10, routing.KindOwn, t0)
	first := route("first", "u", "k", "de-2", "DE", 9, routing.KindOwn, t0)
	second := route("second", "u", "k", "de-3", "DE", 9, routing.KindOwn, t0)
	dear := route("dear", "u", "k", "de-4", "DE", 10, routing.KindOwn, t0)
	ix := routing.NewIndex([]routing.Route{r, dear, first, second})
	if alt, ok := ix.Alternative(r); !ok || alt.ID != "first" {
		t.Errorf("Alternative = %s, %v; want first (cheapest, first indexed among equals)", alt.ID, ok)
	}
	ix.Rely(first, t0.Add(time.Hour))
	ix.Rely(first, t0)
	if at := ix.ReliedOn(first); !at.Equal(t0.Add(time.Hour)) {
		t.Errorf("relied on at t0+1h, then recorded at t0: ReliedOn = %v, want the later", at.Sub(t0))
	}
	if !ix.Remove(first) || ix.Remove(first) {
		t.Error("Remove: want true once, then false")
	}
	if at := ix.ReliedOn(first); !at.IsZero() {
		t.Errorf("removed, ReliedOn = %v, want none", at)
	}
	if alt, ok := ix.Alternative(r); !ok || alt.ID != "second" {
		t.Errorf("first removed: Alternative = %s, %v; want second", alt.ID, ok)
	}
}
