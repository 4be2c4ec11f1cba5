package routing_test

import (
	"fmt"
	"reflect"
	"slices"
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
	lastMove time.Time
	// lastPlan is the time of the node's plan before.
	lastPlan time.Time
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
// carrying out every plan, and checks each plan against the help page's rules.
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
		relied := map[string]time.Time{} // the model's: by route ID, the last move that kept it

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
				checkPlan(t, pn, n, now, in, all, closed, relied, p, unusedAfter, share, moveAfter, moveEvery, mark)
				for _, a := range p.Actions {
					closed[a.Route.ID] = true
					if ix.Remove(a.Route) {
						t.Fatalf("plan %s at %v did not record closing %s", n.ID, now.Sub(t0), a.Route.ID)
					}
					if a.Reason == routing.ReasonMove {
						relied[a.Keeps.ID] = now
					}
				}
				pn.node.State = p.State
			}
		}
	})
}

func checkPlan(t *rapid.T, pn *propNode, n routing.Node, now time.Time, in, all []routing.Route, closed map[string]bool,
	relied map[string]time.Time, p routing.Plan, unusedAfter time.Duration, share float64, moveAfter, moveEvery time.Duration, mark float64) {
	where := fmt.Sprintf("node %s (%v, paused %v, overloaded since %v, memory %v) at %v",
		n.ID, n.Role, n.Paused, n.OverloadedSince.Sub(t0), n.MemoryPercent, now.Sub(t0))
	overloaded := n.Overloaded()
	// A route a move relied on counts as in use for unusedAfter, and is
	// not moved either.
	isRelied := func(r routing.Route) bool {
		at, ok := relied[r.ID]
		return ok && now.Sub(at) < unusedAfter
	}
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
		if isRelied(r) {
			t.Fatalf("%s: closed %s (%s), which a move relied on at %v", where, r.ID, a.Reason, relied[r.ID].Sub(t0))
		}
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
		if seen[r.ID] || since < unusedAfter || isRelied(r) {
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
			if r.ID == a.Route.ID || seen[r.ID] || now.Sub(lastUse(r)) >= unusedAfter || (r.Kind != routing.KindOwn && !n.Paused) || isRelied(r) {
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
			if now.Sub(lastUse(r)) >= unusedAfter && !seen[r.ID] && !isRelied(r) {
				t.Fatalf("%s: paused node kept unused route %s", where, r.ID)
			}
		}
	}
	// A few at a time: no plan closes more unused routes than the time
	// since the node's plan before (at most an hour, and no more than the
	// overload has lasted) earns at share × sessions an hour, plus one;
	// the node's first plan, one.
	unused := 0
	for _, a := range p.Actions {
		if a.Reason == routing.ReasonUnused {
			unused++
		}
	}
	if unused > 0 {
		earned := time.Duration(0)
		if !pn.lastPlan.IsZero() {
			earned = min(now.Sub(pn.lastPlan), time.Hour, now.Sub(n.OverloadedSince))
		}
		if most := int(share*float64(len(in))*earned.Hours()+1e-6) + 1; unused > most {
			t.Fatalf("%s: %d unused routes closed in one plan, more than %d (%v of %d sessions an hour, over %v)", where, unused, most, share, len(in), earned)
		}
	}
	pn.lastPlan = now
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

// TestPropertyUnusedPace plans an overloaded exit of a fixed number of
// sessions (Node.Sessions; only the unused candidates are passed) at a
// drawn period from a second to an hour, or at irregular steps of up to
// 70 minutes: an overload that first has nothing to close, then always
// more unused routes than it may close; a spell without overload; a
// second overload, with routes to close from its start. It checks the
// help page's "a few at a time … about 5 % of the node's sessions an
// hour", at any cadence:
//
//   - a plan closes at most what the time since the plan before earns at
//     5 % × sessions an hour, plus one, and nothing is saved up: not
//     across a gap longer than the period planned before it (the time
//     between the two plans before), not from before the overload, and
//     not beyond an hour's worth; the node's first plan, one;
//   - from any plan to a later one, the plans in between and the later
//     one close at most what the time between them earns, plus one;
//   - planned at a steady period, every hour of overload with routes to
//     close closes at least 5 % × sessions − 10 %, minus one, once the
//     node's first two plans are past;
//   - planned at a steady period, the second overload's first hour: by
//     its first plan an hour or more after its start, it has closed what
//     the time since its start earns, −10 % of the hourly figure, −1, and
//     no more than that time earns, plus one.
//
// The token bucket this replaced failed the first after quiet hours, and
// the five-minute schedule after it the last at periods above 5 minutes:
// 1,000 sessions planned every 10 minutes closed 30 an hour, not 50. The
// pace before this one failed the last: an overload's first two plans,
// knowing no period, closed one each (34 in the first hour every 10
// minutes, not 50).
func TestPropertyUnusedPace(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sessions := rapid.IntRange(1, 5000).Draw(t, "sessions")
		every := rapid.SampledFrom([]time.Duration{time.Second, 5 * time.Second, 30 * time.Second, time.Minute,
			5 * time.Minute, 7 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 0}).Draw(t, "every")
		minutes := func(name string, lo, hi int) time.Duration {
			return time.Duration(rapid.IntRange(lo, hi).Draw(t, name)) * time.Minute
		}
		quiet, busy, gap, second := minutes("quiet", 0, 120), minutes("busy", 60, 100), minutes("gap", 1, 90), minutes("second", 1, 150)
		if every == time.Second {
			// A day of plans a second apart is slow under -race; the
			// rules at that period show within an overload of an hour.
			quiet, busy, gap, second = min(quiet, 10*time.Minute), time.Hour, min(gap, 5*time.Minute), min(second, 5*time.Minute)
		}
		rate := 0.05 * float64(sessions)
		earns := func(d time.Duration) int { return int(rate*d.Hours()+1e-6) + 1 }
		busyFrom, end1 := t0.Add(quiet), t0.Add(quiet+busy)
		start2 := end1.Add(gap)
		end := start2.Add(second)

		n := routing.Node{ID: "x", Role: routing.RoleExit, Country: "DE", Sessions: sessions, MemoryPercent: 50}
		var cands []routing.Route
		next := 0
		type closure struct {
			at, prev time.Time // the plan, and the one before it
			count    int
		}
		var log []closure
		var prev time.Time         // the plan before
		period := time.Duration(0) // between the last two plans
		for now := t0; now.Before(end); {
			overloaded := now.Before(end1) || !now.Before(start2)
			n.OverloadedSince = time.Time{}
			switch {
			case now.Before(end1):
				n.OverloadedSince = t0
			case !now.Before(start2):
				n.OverloadedSince = start2
			default:
				n.OverloadEnded = end1
			}
			hasWork := overloaded && !now.Before(busyFrom)
			if !hasWork {
				cands = cands[:0]
			}
			most := 1
			if !prev.IsZero() {
				lag := min(now.Sub(prev), time.Hour, now.Sub(n.OverloadedSince))
				if period > 0 {
					lag = min(lag, period)
				}
				most = earns(lag)
			}
			for hasWork && len(cands) < most+2 && len(cands) < sessions {
				cands = append(cands, route(fmt.Sprintf("r%d", next), fmt.Sprintf("u%d", next), "k", "x", "DE", 10, routing.KindOwn, now.Add(-3*time.Hour)))
				next++
			}
			p, err := routing.Policy{}.Plan(now, n, cands, nil)
			if err != nil {
				t.Fatalf("plan at %v: %v", now.Sub(t0), err)
			}
			n.State = p.State
			if k := len(p.Actions); k > 0 {
				if !overloaded {
					t.Fatalf("closed %d at %v, not overloaded", k, now.Sub(t0))
				}
				if k > most {
					t.Fatalf("%v: one plan closed %d, more than %d (%v since the plan before, %v between the two before it, overloaded for %v; %d sessions)",
						now.Sub(t0), k, most, now.Sub(prev), period, now.Sub(n.OverloadedSince), sessions)
				}
				log = append(log, closure{now, prev, k})
				for _, a := range p.Actions {
					cands = slices.DeleteFunc(cands, func(r routing.Route) bool { return r.ID == a.Route.ID })
				}
			}
			if !prev.IsZero() {
				period = now.Sub(prev)
			}
			prev = now
			step := every
			if step == 0 {
				step = time.Duration(rapid.IntRange(1, 4200).Draw(t, "step")) * time.Second
			}
			now = now.Add(step)
		}
		// From the plan before log[i] to log[j]: at most what that time
		// earns, plus one.
		for i := range log {
			c := 0
			for j := i; j < len(log); j++ {
				c += log[j].count
				if most := earns(log[j].at.Sub(log[i].prev)); c > most {
					t.Fatalf("from the plan at %v to the one at %v: %d closed, more than the %d that time earns, plus one (%d sessions)",
						log[i].prev.Sub(t0), log[j].at.Sub(t0), c, most, sessions)
				}
			}
		}
		if every == 0 {
			return
		}
		within := func(from time.Time, d time.Duration) int {
			c := 0
			for _, e := range log {
				if !e.at.Before(from) && e.at.Before(from.Add(d)) {
					c += e.count
				}
			}
			return c
		}
		for from := busyFrom; !from.Add(time.Hour).After(end1); from = from.Add(max(every, time.Minute)) {
			if from.Before(t0.Add(2 * every)) {
				continue
			}
			if c := within(from, time.Hour); float64(c) < 0.9*rate-1 {
				t.Fatalf("%d closed within the hour from %v, fewer than %.1f (5 %% of %d sessions, -10 %%, -1; every %v)", c, from.Sub(t0), 0.9*rate-1, sessions, every)
			}
		}
		// The second overload's first hour, up to its first plan an hour
		// or more after its start, if it lasted that long.
		// Plans fall on t0 + k × every.
		if k := (start2.Add(time.Hour).Sub(t0) + every - 1) / every; t0.Add(k * every).Before(end) {
			last := t0.Add(k * every)
			c := within(start2, last.Sub(start2)+time.Nanosecond)
			due := rate * last.Sub(start2).Hours()
			if float64(c) < due-0.1*rate-1 || float64(c) > due+1 {
				t.Fatalf("second overload: %d closed from its start at %v to its plan at %v, want %.1f, -10 %% of %.1f, -1, +1 (every %v, %d sessions)",
					c, start2.Sub(t0), last.Sub(t0), due, rate, every, sessions)
			}
		}
	})
}
