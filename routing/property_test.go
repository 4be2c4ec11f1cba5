package routing_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// propNode is a node of a generated fleet, with its overload as an
// interval relative to t0.
type propNode struct {
	node       routing.Node
	overloaded bool
	from, to   time.Duration // overloaded in [from, to)
	// What the checks remember between rounds.
	lastMove    time.Time
	lastAccrual time.Time // last plan at which the unused rule applied
	accrued     float64   // upper bound on tokens ever granted
	unusedCount int
}

func (pn *propNode) at(now time.Time) routing.Node {
	n := pn.node
	n.OverloadedSince, n.OverloadEnded = time.Time{}, time.Time{}
	if pn.overloaded {
		switch d := now.Sub(t0); {
		case d >= pn.from && d < pn.to:
			n.OverloadedSince = t0.Add(pn.from)
		case d >= pn.to:
			n.OverloadEnded = t0.Add(pn.to)
		}
	}
	return n
}

func effective(p routing.Policy) (unusedAfter time.Duration, share float64, moveAfter, moveEvery time.Duration, mark float64) {
	unusedAfter, share, moveAfter, moveEvery, mark = p.UnusedAfter, p.UnusedPerHour, p.MoveAfter, p.MoveEvery, p.MoveMemoryPercent
	if unusedAfter == 0 {
		unusedAfter = 2 * time.Hour
	}
	if share == 0 {
		share = 0.05
	}
	if moveAfter == 0 {
		moveAfter = 15 * time.Minute
	}
	if moveEvery == 0 {
		moveEvery = 5 * time.Minute
	}
	if mark == 0 {
		mark = 80
	}
	return
}

func lastUse(r routing.Route) time.Time {
	if r.LastTraffic.After(r.Start) {
		return r.LastTraffic
	}
	return r.Start
}

// fleetAlternative answers the move rule's question by brute force: the
// cheapest route of all (the first among equals) that is an alternative to
// r and not in gone (closed or removed).
func fleetAlternative(r routing.Route, all []routing.Route, gone map[string]bool) (routing.Route, bool) {
	var best routing.Route
	found := false
	for _, o := range all {
		if !gone[o.ID] && routing.IsAlternative(r, o) && (!found || o.Price < best.Price) {
			best, found = o, true
		}
	}
	return best, found
}

// TestPropertyPlansKeepTheRules plans random fleets over random schedules,
// carrying out every plan, and checks each plan against the seed's rules.
func TestPropertyPlansKeepTheRules(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pol := routing.Policy{
			UnusedAfter:       rapid.SampledFrom([]time.Duration{0, 30 * time.Minute, 2 * time.Hour}).Draw(t, "unusedAfter"),
			UnusedPerHour:     rapid.SampledFrom([]float64{0, 0.05, 0.5, 1}).Draw(t, "unusedPerHour"),
			MoveAfter:         rapid.SampledFrom([]time.Duration{0, time.Minute}).Draw(t, "moveAfter"),
			MoveEvery:         rapid.SampledFrom([]time.Duration{0, time.Minute}).Draw(t, "moveEvery"),
			MoveMemoryPercent: rapid.SampledFrom([]float64{0, 50}).Draw(t, "mark"),
		}
		unusedAfter, share, moveAfter, moveEvery, mark := effective(pol)

		countries := []string{"DE", "FR"}
		var nodes []*propNode
		for i := range rapid.IntRange(1, 5).Draw(t, "nodes") {
			pn := &propNode{node: routing.Node{
				ID:            fmt.Sprintf("n%d", i),
				Role:          rapid.SampledFrom([]routing.Role{routing.RoleEntry, routing.RoleExit}).Draw(t, "role"),
				Country:       rapid.SampledFrom(countries).Draw(t, "country"),
				Paused:        rapid.Float64Range(0, 1).Draw(t, "paused") < 0.25,
				MemoryPercent: rapid.SampledFrom([]float64{40, 50, 80, 85, 99}).Draw(t, "memory"),
			}}
			pn.overloaded = rapid.Bool().Draw(t, "overloaded")
			pn.from = time.Duration(rapid.IntRange(-180, 60).Draw(t, "from")) * time.Minute
			pn.to = pn.from + time.Duration(rapid.IntRange(1, 600).Draw(t, "length"))*time.Minute
			nodes = append(nodes, pn)
		}
		var all []routing.Route
		inUse := map[string]bool{}
		for i := range rapid.IntRange(0, 60).Draw(t, "routes") {
			n := nodes[rapid.IntRange(0, len(nodes)-1).Draw(t, "node")]
			r := routing.Route{
				ID:      fmt.Sprintf("r%d", i),
				User:    fmt.Sprintf("u%d", rapid.IntRange(0, 7).Draw(t, "user")),
				Key:     fmt.Sprintf("k%d", rapid.IntRange(0, 2).Draw(t, "key")),
				Node:    n.node.ID,
				Country: n.node.Country,
				Price:   pricing.Price(rapid.IntRange(1, 3).Draw(t, "price")),
				Kind:    rapid.SampledFrom([]routing.Kind{routing.KindOwn, routing.KindPartner, routing.KindExtraLink}).Draw(t, "kind"),
				Start:   t0.Add(-time.Duration(rapid.IntRange(0, 400).Draw(t, "age")) * time.Minute),
			}
			if rapid.Bool().Draw(t, "traffic") {
				r.LastTraffic = r.Start.Add(time.Duration(rapid.IntRange(0, 400).Draw(t, "last")) * time.Minute)
				if r.LastTraffic.After(t0) {
					r.LastTraffic = t0
				}
			}
			inUse[r.ID] = rapid.Float64Range(0, 1).Draw(t, "busy") < 0.5
			all = append(all, r)
		}
		ix := routing.NewIndex(all)
		closed := map[string]bool{}

		now := t0
		for round := range rapid.IntRange(1, 40).Draw(t, "rounds") {
			if round > 0 {
				now = now.Add(rapid.SampledFrom([]time.Duration{time.Second, 30 * time.Second, 5 * time.Minute, 17 * time.Minute, time.Hour}).Draw(t, "step"))
			}
			for i := range all {
				if inUse[all[i].ID] {
					all[i].LastTraffic = now
				}
			}
			for _, pn := range nodes {
				n := pn.at(now)
				var in []routing.Route
				for _, r := range all {
					if r.Node == n.ID && !closed[r.ID] {
						in = append(in, r)
					}
				}
				p, err := pol.Plan(now, n, in, ix)
				if err != nil {
					t.Fatalf("plan %s at %v: %v", n.ID, now.Sub(t0), err)
				}
				again, err := pol.Plan(now, n, in, ix)
				if err != nil || !reflect.DeepEqual(p, again) {
					t.Fatalf("plan %s at %v differs when asked twice", n.ID, now.Sub(t0))
				}
				checkPlan(t, pn, n, now, in, all, closed, p, unusedAfter, share, moveAfter, moveEvery, mark)
				for _, a := range p.Actions {
					closed[a.Route.ID] = true
					ix.Remove(a.Route)
				}
				pn.node.State = p.State
			}
		}
	})
}

func checkPlan(t *rapid.T, pn *propNode, n routing.Node, now time.Time, in, all []routing.Route, closed map[string]bool,
	p routing.Plan, unusedAfter time.Duration, share float64, moveAfter, moveEvery time.Duration, mark float64) {
	where := fmt.Sprintf("node %s (%v, paused %v, overloaded since %v, memory %v) at %v",
		n.ID, n.Role, n.Paused, n.OverloadedSince.Sub(t0), n.MemoryPercent, now.Sub(t0))
	overloaded := n.Overloaded()
	byID := map[string]routing.Route{}
	for _, r := range in {
		byID[r.ID] = r
	}
	seen := map[string]bool{}
	moves := 0
	for _, a := range p.Actions {
		r, ok := byID[a.Route.ID]
		if !ok || r != a.Route {
			t.Fatalf("%s: action on route %s, not one of the node's live routes", where, a.Route.ID)
		}
		if seen[r.ID] {
			t.Fatalf("%s: route %s twice in one plan", where, r.ID)
		}
		seen[r.ID] = true
		since := now.Sub(lastUse(r))
		unused := since >= unusedAfter
		if a.SinceTraffic != since {
			t.Fatalf("%s: %s since traffic %v, want %v", where, r.ID, a.SinceTraffic, since)
		}
		if !overloaded && !n.Paused {
			t.Fatalf("%s: closed %s on a node neither overloaded nor paused", where, r.ID)
		}
		switch a.Reason {
		case routing.ReasonUnused:
			pn.unusedCount++
			if n.Role != routing.RoleExit || !overloaded || n.Paused || r.Kind != routing.KindOwn || !unused {
				t.Fatalf("%s: %s (%v, unused %v) closed as unused", where, r.ID, r.Kind, since)
			}
		case routing.ReasonDrain:
			if !n.Paused || !unused {
				t.Fatalf("%s: %s (unused %v) drained", where, r.ID, since)
			}
		case routing.ReasonMove:
			moves++
			if unused || n.MemoryPercent <= mark || (!n.Paused && (!overloaded || now.Sub(n.OverloadedSince) < moveAfter)) {
				t.Fatalf("%s: %s (unused %v) moved", where, r.ID, since)
			}
			if r.Kind != routing.KindOwn && !n.Paused {
				t.Fatalf("%s: %s route %s moved off a node that is not paused", where, r.Kind, r.ID)
			}
			if !routing.IsAlternative(r, a.Keeps) || closed[a.Keeps.ID] {
				t.Fatalf("%s: %s moved onto %+v (closed %v)", where, r.ID, a.Keeps, closed[a.Keeps.ID])
			}
			if !pn.lastMove.IsZero() && now.Sub(pn.lastMove) < moveEvery {
				t.Fatalf("%s: %s moved %v after the previous move", where, r.ID, now.Sub(pn.lastMove))
			}
			pn.lastMove = now
		default:
			t.Fatalf("%s: unknown reason %q", where, a.Reason)
		}
		if !unused {
			// Never a user's only route: checked against the fleet
			// itself, not the index.
			if _, held := fleetAlternative(r, all, closed); !held {
				t.Fatalf("%s: closed %s, in use and its user's only route", where, r.ID)
			}
		}
	}
	if moves > 1 {
		t.Fatalf("%s: %d routes in use closed in one plan", where, moves)
	}
	// Order: unused routes longest unused first, and none left behind that
	// was unused longer than one closed; the route moved is the one that
	// moved traffic least recently among those with an alternative.
	var oldestClosed time.Duration = -1
	for i, a := range p.Actions {
		if a.Reason == routing.ReasonMove {
			continue
		}
		if i > 0 && a.SinceTraffic > p.Actions[i-1].SinceTraffic {
			t.Fatalf("%s: %s (%v) closed after %s (%v)", where, a.Route.ID, a.SinceTraffic, p.Actions[i-1].Route.ID, p.Actions[i-1].SinceTraffic)
		}
		if oldestClosed < 0 || a.SinceTraffic < oldestClosed {
			oldestClosed = a.SinceTraffic
		}
	}
	for _, r := range in {
		since := now.Sub(lastUse(r))
		if seen[r.ID] || since < unusedAfter {
			continue
		}
		if oldestClosed >= 0 && since > oldestClosed && (n.Paused || r.Kind == routing.KindOwn) {
			t.Fatalf("%s: kept %s (unused %v), closed one unused %v", where, r.ID, since, oldestClosed)
		}
	}
	for _, a := range p.Actions {
		if a.Reason != routing.ReasonMove {
			continue
		}
		for _, r := range in {
			if r.ID == a.Route.ID || seen[r.ID] || now.Sub(lastUse(r)) >= unusedAfter || (r.Kind != routing.KindOwn && !n.Paused) {
				continue
			}
			if !lastUse(r).Before(lastUse(a.Route)) {
				continue
			}
			if o, ok := fleetAlternative(r, all, closed); ok {
				t.Fatalf("%s: moved %s (traffic %v ago) before %s (traffic %v ago), which has alternative %s",
					where, a.Route.ID, a.SinceTraffic, r.ID, now.Sub(lastUse(r)), o.ID)
			}
		}
	}
	if n.Paused {
		for _, r := range in {
			if now.Sub(lastUse(r)) >= unusedAfter && !seen[r.ID] {
				t.Fatalf("%s: paused node kept unused route %s", where, r.ID)
			}
		}
	}
	// The unused budget: one token at the start, then share × sessions an
	// hour while the rule applies.
	if n.Role == routing.RoleExit && overloaded && !n.Paused {
		if pn.lastAccrual.IsZero() {
			pn.accrued = 1
		} else {
			from := pn.lastAccrual
			if from.Before(n.OverloadedSince) {
				from = n.OverloadedSince
			}
			pn.accrued += share * float64(len(in)) * now.Sub(from).Hours()
		}
		pn.lastAccrual = now
	}
	if float64(pn.unusedCount) > pn.accrued+1e-6 {
		t.Fatalf("%s: %d unused routes closed, the budget granted %.3f", where, pn.unusedCount, pn.accrued)
	}
}

// TestPropertyIndexFindsEveryAlternative checks the Index against a plain
// scan: it answers exactly when an alternative exists, with the cheapest.
func TestPropertyIndexFindsEveryAlternative(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var rs []routing.Route
		for i := range rapid.IntRange(0, 40).Draw(t, "routes") {
			rs = append(rs, routing.Route{
				ID:      fmt.Sprintf("r%d", i),
				User:    fmt.Sprintf("u%d", rapid.IntRange(0, 3).Draw(t, "user")),
				Key:     fmt.Sprintf("k%d", rapid.IntRange(0, 1).Draw(t, "key")),
				Node:    fmt.Sprintf("n%d", rapid.IntRange(0, 3).Draw(t, "node")),
				Country: rapid.SampledFrom([]string{"DE", "FR"}).Draw(t, "country"),
				Price:   pricing.Price(rapid.IntRange(1, 3).Draw(t, "price")),
				Kind:    routing.KindOwn, Start: t0,
			})
		}
		ix := routing.NewIndex(rs)
		removed := map[string]bool{}
		for _, r := range rs {
			if rapid.Bool().Draw(t, "remove") {
				if !ix.Remove(r) {
					t.Fatalf("Remove(%s) = false", r.ID)
				}
				if ix.Remove(r) {
					t.Fatalf("Remove(%s) twice = true", r.ID)
				}
				removed[r.ID] = true
			}
		}
		for _, r := range rs {
			got, ok := ix.Alternative(r)
			want, exists := fleetAlternative(r, rs, removed)
			if ok != exists {
				t.Fatalf("Alternative(%s) found = %v, want %v", r.ID, ok, exists)
			}
			if ok && (!routing.IsAlternative(r, got) || removed[got.ID] || got.Price != want.Price) {
				t.Fatalf("Alternative(%s) = %+v, want an unremoved alternative at %d", r.ID, got, want.Price)
			}
		}
	})
}
