package routing_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/proofkit/nodekit/routing"
)

// dayOfUnused plans an exit of 1,000 sessions, every one an unused own
// route, overloaded for a day and planned every period; the routes closed
// leave the node, so its 5 % an hour falls as it empties. It returns how
// many closed in the day and the most one plan closed. Each plan is given
// the sessions as Node.Sessions and 60 of the routes, more than any plan
// may close, which keeps a day of plans a second apart quick.
func dayOfUnused(t *testing.T, every time.Duration) (closed, most int) {
	t.Helper()
	n := exitNode(0, 50)
	routes := unusedRoutes(1000, "de-1", t0.Add(-3*time.Hour))
	slices.Reverse(routes) // longest unused first
	for now := t0; now.Before(t0.Add(24 * time.Hour)); now = now.Add(every) {
		n.Sessions = len(routes)
		p := mustPlan(t, routing.Policy{}, now, n, routes[:min(60, len(routes))], nil)
		n.State = p.State
		closed += len(p.Actions)
		most = max(most, len(p.Actions))
		for _, a := range p.Actions {
			routes = slices.DeleteFunc(routes, func(r routing.Route) bool { return r.ID == a.Route.ID })
		}
	}
	return closed, most
}

// "About 5 % of the node's sessions an hour" whatever the platform's
// cadence: planned every second up to every hour, an overloaded exit of
// 1,000 unused sessions closes within 3 % of what it closes planned every
// 30 seconds over a day, and "a few at a time": no plan closes more than
// its period earns at the hourly rate, plus one (every 10 minutes, 9).
func TestUnusedPaceOverADay(t *testing.T) {
	ref, _ := dayOfUnused(t, 30*time.Second)
	for _, every := range []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour} {
		t.Run(every.String(), func(t *testing.T) {
			closed, most := dayOfUnused(t, every)
			t.Logf("every %v: %d closed in a day (30 s: %d), most %d in one plan", every, closed, ref, most)
			if math.Abs(float64(closed-ref)) > 0.03*float64(ref) {
				t.Errorf("every %v: %d closed in a day, want within 3 %% of the %d planned every 30 s", every, closed, ref)
			}
			if limit := int(50*every.Hours()+1e-9) + 1; most > limit {
				t.Errorf("every %v: one plan closed %d, more than the %d its period earns, plus one", every, most, limit)
			}
		})
	}
}

// Nothing is saved up across a gap longer than the period planned before
// it: an exit of 1,000 unused sessions (50 an hour, one every 72 s)
// planned every 30 s or every 10 minutes, then not for an hour (the
// platform stopped), closes no more in the plan after the gap than the
// period before it earns, plus one.
func TestUnusedPaceSavesNothingAcrossAGap(t *testing.T) {
	for _, tc := range []struct {
		every time.Duration
		most  int
	}{{30 * time.Second, 1}, {10 * time.Minute, 9}} {
		n := exitNode(0, 50)
		routes := unusedRoutes(1000, "de-1", t0.Add(-3*time.Hour))
		n.Sessions = len(routes)
		now := t0
		for ; now.Before(t0.Add(time.Hour)); now = now.Add(tc.every) {
			n.State = mustPlan(t, routing.Policy{}, now, n, routes, nil).State
		}
		p := mustPlan(t, routing.Policy{}, now.Add(time.Hour), n, routes, nil)
		if len(p.Actions) > tc.most {
			t.Errorf("planned every %v, then an hour later: %d closed at once, want at most %d", tc.every, len(p.Actions), tc.most)
		}
	}
}

// firstHourRun is one overload's start as a platform plans it: an exit of
// 1,000 sessions (Node.Sessions; closed routes are replaced, so the rate
// stays 50 an hour, one every 72 s), all its routes unused, overloaded
// from s = t0 and planned every period from s + phase. What the platform
// did before: nothing (a node never planned), plans at the same period
// while the node was healthy, or an earlier overload planned at that
// period and no plan since (a platform that plans only overloaded nodes).
type firstHourRun struct {
	every, phase time.Duration
	before       string // "never planned", "planned while healthy", "an earlier overload"
}

// firstHourPlan is one plan of the overload: when, how many it closed, and
// the most the help page's "a few at a time" lets it close: what the time
// since the plan before (no more than the overload's age, nor an hour)
// earns at 50 an hour, plus one; the node's first plan ever, one.
type firstHourPlan struct {
	at           time.Time
	closed, most int
}

// run plans the overload up to its first plan an hour or more after its
// start, and returns its plans.
func (fr firstHourRun) run(t *testing.T) []firstHourPlan {
	t.Helper()
	const sessions = 1000
	s := t0
	n := exitNode(-1, 50)
	n.Sessions = sessions
	next := 0
	var pool []routing.Route
	plan := func(now time.Time) routing.Plan {
		for len(pool) < 60 {
			id := fmt.Sprintf("r%05d", next)
			pool = append(pool, route(id, "u"+id, "k", n.ID, "DE", 10, routing.KindOwn, s.Add(-3*time.Hour)))
			next++
		}
		p := mustPlan(t, routing.Policy{}, now, n, pool, nil)
		n.State = p.State
		for _, a := range p.Actions {
			pool = slices.DeleteFunc(pool, func(r routing.Route) bool { return r.ID == a.Route.ID })
		}
		return p
	}
	first := s.Add(fr.phase)
	switch fr.before {
	case "planned while healthy":
		for now := first.Add(-2 * time.Hour); now.Before(s); now = now.Add(fr.every) {
			plan(now)
		}
	case "an earlier overload":
		n.OverloadedSince = s.Add(-3 * time.Hour)
		for now := first.Add(-3 * time.Hour); now.Before(s.Add(-2 * time.Hour)); now = now.Add(fr.every) {
			plan(now)
		}
		n.OverloadedSince, n.OverloadEnded = time.Time{}, s.Add(-2*time.Hour)
	}
	n.OverloadedSince = s
	var plans []firstHourPlan
	prev := n.State.PlannedAt
	for now := first; ; now = now.Add(fr.every) {
		most := 1
		if !prev.IsZero() {
			most = int(50*min(now.Sub(prev), now.Sub(s), time.Hour).Hours()+1e-9) + 1
		}
		plans = append(plans, firstHourPlan{now, len(plan(now).Actions), most})
		prev = now
		if !now.Before(s.Add(time.Hour)) {
			return plans
		}
	}
}

// An overload's first hour at any plan period from 5 s to an hour: by the
// overload's first plan an hour or more after its start (at s + T), the
// node has closed what T earns at 5 % of its sessions an hour, −10 % of
// the hourly figure, −1, and at most what T earns, plus one; and no plan
// closes more than its own period earns, plus one (every 10 minutes, 9;
// every hour, 51): the first one what the time since the overload's start
// earns. A node never planned before has no plan before to bound its
// first one, which closes one wherever in the overload it falls, then a
// period's worth a plan: its first hour is short by what the time before
// that first plan earns, no more. Planned every 10 minutes from the
// overload's start, the pace before this one closed 34 in the first hour
// (1, 1, then 8 a plan): its first two plans knew no period.
func TestUnusedFirstHour(t *testing.T) {
	for _, every := range []time.Duration{5 * time.Second, 30 * time.Second, 10 * time.Minute, time.Hour} {
		var runs []firstHourRun
		for _, before := range []string{"never planned", "planned while healthy", "an earlier overload"} {
			for _, phase := range []time.Duration{0, every / 2, every - every/10} {
				runs = append(runs, firstHourRun{every, phase, before})
			}
		}
		for _, fr := range runs {
			t.Run(fmt.Sprintf("%v/%v/%v", every, fr.before, fr.phase), func(t *testing.T) {
				plans := fr.run(t)
				closed, inHour := 0, 0
				for _, p := range plans {
					if p.closed > p.most {
						t.Errorf("plan at s+%v closed %d, more than the %d its period earns, plus one", p.at.Sub(t0), p.closed, p.most)
					}
					closed += p.closed
					if p.at.Before(t0.Add(time.Hour)) {
						inHour += p.closed
					}
				}
				last := plans[len(plans)-1].at.Sub(t0)
				due := 50 * last.Hours()
				short := 0.0
				if fr.before == "never planned" {
					short = 50 * fr.phase.Hours()
				}
				if float64(closed) < due-short-0.1*50-1 || float64(closed) > due+1 {
					t.Errorf("by s+%v: %d closed, want %.1f (−%.1f, +1)", last, closed, due, short+6)
				}
				t.Logf("by s+%v: %d closed (%.1f due), %d in the first hour, first plan %d, most %d in one plan",
					last, closed, due, inHour, plans[0].closed, slices.MaxFunc(plans, func(a, b firstHourPlan) int { return a.closed - b.closed }).closed)
			})
		}
	}
}

// An overload's first plan closes what the time since the overload's
// start earns, but nothing the platform saved up before it: not across a
// stop longer than the period planned before (here an hour, the overload
// starting 40 minutes into it), and, on a node never planned before, not
// more than one. 1,000 sessions: 50 an hour, one every 72 s.
func TestUnusedFirstPlanSavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every time.Duration // the period planned before the overload; 0: never planned
		stop  time.Duration // no plan for this long before the overload's first
		since time.Duration // the overload's age at its first plan
		want  int
	}{
		{"never planned, an hour into the overload", 0, 0, time.Hour, 1},
		{"never planned, at the overload's start", 0, 0, 0, 1},
		{"every 10 minutes, 7 minutes in", 10 * time.Minute, 0, 7 * time.Minute, 6},
		{"every 30 s, 20 s in", 30 * time.Second, 0, 20 * time.Second, 1},
		{"every 30 s, stopped an hour, 40 minutes in", 30 * time.Second, time.Hour, 40 * time.Minute, 1},
		{"every 10 minutes, stopped an hour, 40 minutes in", 10 * time.Minute, time.Hour, 40 * time.Minute, 9},
		{"every hour, 40 minutes in", time.Hour, 0, 40 * time.Minute, 34},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := exitNode(-1, 50)
			n.Sessions = 1000
			routes := unusedRoutes(60, n.ID, t0.Add(-3*time.Hour))
			first := t0.Add(tc.since) // the overload starts at t0
			if tc.every > 0 {
				last := first.Add(-max(tc.stop, tc.every))
				for now := last.Add(-2 * time.Hour); !now.After(last); now = now.Add(tc.every) {
					n.State = mustPlan(t, routing.Policy{}, now, n, routes, nil).State
				}
			}
			n.OverloadedSince = t0
			p := mustPlan(t, routing.Policy{}, first, n, routes, nil)
			if len(p.Actions) != tc.want {
				t.Errorf("the overload's first plan closed %d, want %d", len(p.Actions), tc.want)
			}
		})
	}
}

// Plans more than an hour apart are held to an hour's worth each: an exit
// of 1,000 unused sessions planned every 2 hours closes 50 or 51 a plan
// (the hour's figure, plus one), not 100.
func TestUnusedPlansHoursApart(t *testing.T) {
	n := exitNode(time.Hour, 50)
	n.Sessions = 1000
	routes := unusedRoutes(120, n.ID, t0.Add(-3*time.Hour))
	for i, now := 0, t0; i < 5; i, now = i+1, now.Add(2*time.Hour) {
		p := mustPlan(t, routing.Policy{}, now, n, routes, nil)
		n.State = p.State
		if lo := min(i, 1) * 50; len(p.Actions) < lo || len(p.Actions) > 51 {
			t.Errorf("plan %d, 2 hours after the one before: %d closed, want %d to 51", i, len(p.Actions), lo)
		}
	}
}
