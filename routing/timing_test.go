package routing_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// closure is one route closed, at the real time of its plan (which the
// platform's clock may not show).
type closure struct {
	real time.Time
	why  routing.Reason
}

// checkRealTime checks de-1's closures of overloadedScenario (200 sessions,
// 5 % an hour: 10) against the help page's figures measured in real time:
// unused routes at most ceil(10/12)+1 = 2 within any 5 minutes and 1.1 ×
// 10 + 1 within any hour; routes in use one per 5 minutes. It returns how
// many of each closed.
func checkRealTime(t *testing.T, cs []closure) (unused, moves int) {
	t.Helper()
	var lastMove time.Time
	for i, c := range cs {
		if c.why == routing.ReasonMove {
			moves++
			if !lastMove.IsZero() && c.real.Sub(lastMove) < 5*time.Minute {
				t.Errorf("%v: a route in use moved %v after the previous one", c.real.Sub(t0), c.real.Sub(lastMove))
			}
			lastMove = c.real
			continue
		}
		unused++
		five, hour := 0, 0
		for _, d := range cs[i:] {
			if d.why != routing.ReasonUnused {
				continue
			}
			if d.real.Sub(c.real) < 5*time.Minute {
				five++
			}
			if d.real.Sub(c.real) < time.Hour {
				hour++
			}
		}
		if five > 2 || hour > 12 {
			t.Errorf("%v: %d unused routes closed within 5 minutes (want ≤ 2), %d within the hour (want ≤ 12)", c.real.Sub(t0), five, hour)
		}
	}
	return unused, moves
}

// The platform's clock steps back (3 minutes, then 10 more) while de-1 is
// overloaded and planned every 2, 5, 10 or 30 seconds. Plans go on, the
// node keeps shedding load, and the rules hold in real time.
func TestClockStepsBack(t *testing.T) {
	offset := func(real time.Duration) time.Duration {
		switch {
		case real < 20*time.Minute:
			return 0
		case real < 40*time.Minute:
			return -3 * time.Minute
		}
		return -13 * time.Minute
	}
	for _, every := range []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second} {
		t.Run(every.String(), func(t *testing.T) {
			f := overloadedScenario(routing.RoleExit)
			var cs []closure
			for real := time.Duration(0); real <= 75*time.Minute; real += every {
				from := len(f.log)
				f.round(t, routing.Policy{}, t0.Add(real+offset(real)))
				for _, s := range f.log[from:] {
					for _, a := range s.plan.Actions {
						cs = append(cs, closure{t0.Add(real), a.Reason})
					}
				}
			}
			unused, moves := checkRealTime(t, cs)
			t.Logf("every %v: %d unused closed, %d moved in 75 minutes", every, unused, moves)
			// 75 minutes at one every 6 minutes; moves from minute 15 on
			// (label), one per 5 minutes, each step back delaying one.
			if unused < 10 || moves < 9 {
				t.Errorf("closed %d unused and moved %d across the steps; want the node to go on shedding (≥ 10, ≥ 9)", unused, moves)
			}
		})
	}
}

// A state planned in 2126 (the clock once ran a century ahead) does not
// leave the node unplanned until then: the next move waits five minutes
// and the next unused route one interval (6 minutes at 200 sessions), no
// more.
func TestStatePlannedInTheFuture(t *testing.T) {
	f := overloadedScenario(routing.RoleExit)
	future := t0.AddDate(100, 0, 0)
	f.nodes[0].State = routing.NodeState{PlannedAt: future, LastMove: future, UnusedDue: future,
		UnusedRecent: []routing.Closures{{At: future, Count: 2}}}
	f.nodes[0].OverloadedSince = t0.Add(-time.Hour)
	var cs []closure
	for real := time.Duration(0); real <= 11*time.Minute; real += 30 * time.Second {
		from := len(f.log)
		f.round(t, routing.Policy{}, t0.Add(real))
		for _, s := range f.log[from:] {
			for _, a := range s.plan.Actions {
				cs = append(cs, closure{t0.Add(real), a.Reason})
			}
		}
	}
	var first []string
	for _, c := range cs {
		first = append(first, fmt.Sprintf("%v %s", c.real.Sub(t0), string(c.why)))
	}
	want := []string{"5m0s move", "6m0s unused", "10m0s move"}
	if !slices.Equal(first, want) {
		t.Errorf("after a state planned in 2126: %v, want %v", first, want)
	}
}

// A plan round repeated after a crash, every seventh round of de-1
// planned every 30 seconds for an hour. Over the old state (the crash came
// before the state was stored) the repeat returns the same actions; over
// the stored state, a moment later, it adds nothing the rules do not
// allow: the distinct routes closed keep the figures.
func TestRoundRepeatedAfterACrash(t *testing.T) {
	for _, stored := range []bool{false, true} {
		t.Run(fmt.Sprintf("stored=%v", stored), func(t *testing.T) {
			f := overloadedScenario(routing.RoleExit)
			n := f.nodes[0]
			var cs []closure
			seen := map[string]bool{}
			for i, now := 0, t0; !now.After(t0.Add(time.Hour)); i, now = i+1, now.Add(30*time.Second) {
				f.traffic(now)
				in := f.live(n.ID)
				p := mustPlan(t, routing.Policy{}, now, *n, in, f.ix)
				plans := []routing.Plan{p}
				if i%7 == 3 {
					if stored {
						again := *n
						again.State = p.State
						plans = append(plans, mustPlan(t, routing.Policy{}, now.Add(3*time.Second), again, in, f.ix))
					} else if again := mustPlan(t, routing.Policy{}, now, *n, in, f.ix); !slices.Equal(ids(again), ids(p)) {
						t.Fatalf("%v: repeated over the old state: %v, first %v", now.Sub(t0), ids(again), ids(p))
					}
				}
				for _, p := range plans {
					for _, a := range p.Actions {
						if !seen[a.Route.ID] {
							seen[a.Route.ID] = true
							cs = append(cs, closure{p.At, a.Reason})
						}
						f.closed[a.Route.ID] = true
						f.ix.Remove(a.Route)
					}
					n.State = p.State
				}
			}
			unused, moves := checkRealTime(t, cs)
			t.Logf("%d unused closed, %d moved in an hour", unused, moves)
			if unused < 9 || moves < 9 {
				t.Errorf("closed %d unused and moved %d; want ≥ 9 of each", unused, moves)
			}
		})
	}
}

// "At the same price or less" is what the user pays at the plan's time.
// ann locked 100 on x1 and 90 on x2 at t0; x1 lowered its price to 80 at
// t0+1h, which reaches her session at t0+4h. Before then x2 is an
// alternative; from then on it is dearer than what she pays on x1, and
// her route on x1 is not moved, though x2's locked price is lower than
// x1's.
func TestPriceIsWhatTheUserPaysNow(t *testing.T) {
	var h1, h2 pricing.History
	for _, err := range []error{h1.Set(t0.Add(-time.Hour), 100), h2.Set(t0.Add(-time.Hour), 90), h1.Set(t0.Add(time.Hour), 80)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	s1, err1 := h1.Lock(t0)
	s2, err2 := h2.Lock(t0)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	x1 := routing.Node{ID: "x1", Role: routing.RoleExit, Country: "DE", OverloadedSince: t0, MemoryPercent: 95}
	for _, tc := range []struct {
		at    time.Duration
		moved bool
	}{{4*time.Hour - time.Minute, true}, {4 * time.Hour, false}} {
		now := t0.Add(tc.at)
		p1, err1 := h1.SessionPrice(s1, now)
		p2, err2 := h2.SessionPrice(s2, now)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		r1 := routing.Route{ID: "ann-x1", User: "ann", Key: "vpn", Node: "x1", Country: "DE", Price: p1, Kind: routing.KindOwn, Start: t0, LastTraffic: now}
		r2 := routing.Route{ID: "ann-x2", User: "ann", Key: "vpn", Node: "x2", Country: "DE", Price: p2, Kind: routing.KindOwn, Start: t0, LastTraffic: now}
		p := mustPlan(t, routing.Policy{}, now, x1, []routing.Route{r1}, routing.NewIndex([]routing.Route{r1, r2}))
		if got := len(p.Actions) == 1; got != tc.moved {
			t.Errorf("at t0+%v, paying %d on x1 and %d on x2: planned %v, want moved %v", tc.at, p1, p2, ids(p), tc.moved)
		}
	}
}

// Whatever the plan period and however the platform's clock steps back,
// an overloaded exit with unused routes always at hand closes, in real
// time, no more than ceil(5 % × sessions / 12) + 1 within any 5 minutes
// and 5 % of its sessions, +10 %, +1, within any hour, and moves at most
// one route in use per 5 minutes; and it goes on closing.
func TestPropertyClockStepsBack(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sessions := rapid.IntRange(20, 3000).Draw(t, "sessions")
		every := rapid.SampledFrom([]time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second}).Draw(t, "every")
		few := (sessions+239)/240 + 1
		rate := 0.05 * float64(sessions)
		n := routing.Node{ID: "x", Role: routing.RoleExit, Country: "DE", Sessions: sessions, MemoryPercent: 95,
			OverloadedSince: t0.Add(-time.Hour)}
		var offset time.Duration // the platform's clock minus real time
		var unusedAt []time.Time
		var lastMove time.Time
		next := 0
		var cands []routing.Route
		const span = 2 * time.Hour
		for real := time.Duration(0); real < span; real += every {
			if rapid.IntRange(0, 199).Draw(t, "step?") == 0 {
				offset -= time.Duration(rapid.IntRange(1, 900).Draw(t, "back s")) * time.Second
			}
			now := t0.Add(real + offset)
			for len(cands) < few+2 {
				u := fmt.Sprintf("u%d", next)
				// Unused own routes, and routes in use with a copy on y.
				cands = append(cands,
					route("r"+u, u, "k", "x", "DE", 10, routing.KindOwn, t0.Add(-6*time.Hour)),
					route("busy"+u, "b"+u, "k", "x", "DE", 10, routing.KindOwn, t0.Add(span)))
				next++
			}
			alts := make([]routing.Route, 0, len(cands))
			for _, r := range cands {
				if r.User[0] == 'b' {
					alt := r
					alt.ID, alt.Node = "alt-"+r.ID, "y"
					alts = append(alts, alt)
				}
			}
			p, err := routing.Policy{}.Plan(now, n, cands, routing.NewIndex(append(alts, cands...)))
			if err != nil {
				t.Fatalf("plan at real %v, clock %v: %v", real, real+offset, err)
			}
			n.State = p.State
			at := t0.Add(real)
			for _, a := range p.Actions {
				cands = slices.DeleteFunc(cands, func(r routing.Route) bool { return r.ID == a.Route.ID })
				if a.Reason == routing.ReasonMove {
					if !lastMove.IsZero() && at.Sub(lastMove) < 5*time.Minute {
						t.Fatalf("real %v: moved %v after the previous move", real, at.Sub(lastMove))
					}
					lastMove = at
					continue
				}
				unusedAt = append(unusedAt, at)
			}
		}
		for i, a := range unusedAt {
			five, hour := 0, 0
			for _, b := range unusedAt[i:] {
				if b.Sub(a) < 5*time.Minute {
					five++
				}
				if b.Sub(a) < time.Hour {
					hour++
				}
			}
			if five > few || float64(hour) > 1.1*rate+1 {
				t.Fatalf("from real %v: %d closed within 5 minutes (most %d), %d within the hour (most %.1f)", a.Sub(t0), five, few, hour, 1.1*rate+1)
			}
		}
		// Each step back delays the pace by at most an interval and moves
		// by 5 minutes: the node still sheds.
		if len(unusedAt) == 0 || lastMove.IsZero() {
			t.Fatalf("over 2 hours: %d unused closed, last move %v; want the node to go on shedding", len(unusedAt), lastMove)
		}
	})
}

// A step forward of the clock cannot be told from plans an hour apart: in
// the real five minutes before it, one more move may go, no more; unused
// routes save nothing up across the gap (it is longer than the period
// planned before it), so their figure holds throughout, as outside it.
// de-1, counted as 1,200 sessions (60 unused routes an hour, at most 6
// within 5 minutes), is planned every 10 s; the clock jumps an hour ahead
// at 0:32 and back at 0:50.
func TestClockStepsForward(t *testing.T) {
	for _, strict := range []bool{false, true} {
		f := overloadedScenario(routing.RoleExit)
		f.nodes[0].Sessions = 1200
		var cs []closure
		for real := time.Duration(0); real <= 80*time.Minute; real += 10 * time.Second {
			label := real
			if real >= 32*time.Minute && real < 50*time.Minute {
				label += time.Hour
			}
			from := len(f.log)
			f.round(t, routing.Policy{}, t0.Add(label))
			for _, s := range f.log[from:] {
				for _, a := range s.plan.Actions {
					cs = append(cs, closure{t0.Add(real), a.Reason})
				}
			}
		}
		step := t0.Add(32 * time.Minute)
		var broken []string
		for i, c := range cs {
			five, moves := 0, 0
			for _, d := range cs[i:] {
				if d.real.Sub(c.real) >= 5*time.Minute {
					break
				}
				if d.why == routing.ReasonMove {
					moves++
				} else {
					five++
				}
			}
			most, mostMoves := 6, 1
			if !strict && c.real.After(step.Add(-5*time.Minute)) && !c.real.After(step) {
				mostMoves = 2
			}
			if five > most || moves > mostMoves {
				broken = append(broken, fmt.Sprintf("from %v: %d unused and %d moves within 5 minutes, want at most %d and %d",
					c.real.Sub(t0), five, moves, most, mostMoves))
			}
		}
		switch {
		case !strict && len(broken) > 0:
			t.Errorf("beyond the bound of a step forward: %v", broken)
		case strict && len(broken) == 0:
			t.Errorf("the step forward let nothing more through; the bound this test pins is not reached")
		case strict:
			t.Logf("a step forward, as documented: %v", broken[0])
		}
	}
}
