package routing_test

import (
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
// the sessions as Node.Sessions and 30 of the routes, more than any plan
// may close, which keeps a day of plans a second apart quick.
func dayOfUnused(t *testing.T, every time.Duration) (closed, most int) {
	t.Helper()
	n := exitNode(0, 50)
	routes := unusedRoutes(1000, "de-1", t0.Add(-3*time.Hour))
	slices.Reverse(routes) // longest unused first
	for now := t0; now.Before(t0.Add(24 * time.Hour)); now = now.Add(every) {
		n.Sessions = len(routes)
		p := mustPlan(t, routing.Policy{}, now, n, routes[:min(30, len(routes))], nil)
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
// cadence: planned every second up to every 15 minutes, an overloaded exit
// of 1,000 unused sessions closes within 3 % of what it closes planned
// every 30 seconds over a day, and "a few at a time": no plan closes more
// than its period earns at the hourly rate, plus one (every 10 minutes, 9).
func TestUnusedPaceOverADay(t *testing.T) {
	ref, _ := dayOfUnused(t, 30*time.Second)
	for _, every := range []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute} {
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
