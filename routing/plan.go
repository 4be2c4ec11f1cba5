package routing

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Alternatives answers the one question the move rule asks of the
// platform's store. The platform implements it over its own data; [Index]
// is an in-memory implementation.
type Alternatives interface {
	// Alternative returns a route that r's user holds with r's key
	// through a node other than r.Node, in r.Country, at r.Price or less
	// (see [IsAlternative]), and whether there is one. Routes already
	// closed must not be returned.
	Alternative(r Route) (Route, bool)
}

// IsAlternative reports whether alt lets r's user go on without connecting
// again if r is closed: the same user holds the same route (same key)
// through another node of the same country, at the same price or less.
func IsAlternative(r, alt Route) bool {
	return alt.User == r.User && alt.Key == r.Key && alt.Node != r.Node &&
		alt.Country == r.Country && alt.Price <= r.Price && alt.ID != r.ID
}

// Action is one route the platform should close, with the reason. The
// package closes nothing itself.
type Action struct {
	Route  Route  `json:"route"`
	Reason Reason `json:"reason"`
	// SinceTraffic is how long the route had moved no traffic (since its
	// start if it never did).
	SinceTraffic time.Duration `json:"since_traffic_ns"`
	// Keeps, for ReasonMove, is the route the user goes on through.
	Keeps Route `json:"keeps,omitzero"`
}

// String says what to do and why, e.g. "close route r17 of user u3:
// unused for 2h30m0s; unused own route on an overloaded exit".
func (a Action) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "close route %s of user %s: ", a.Route.ID, a.Route.User)
	switch a.Reason {
	case ReasonUnused, ReasonDrain:
		fmt.Fprintf(&b, "unused for %v; %v", a.SinceTraffic, a.Reason)
	case ReasonMove:
		fmt.Fprintf(&b, "in use; the user keeps route %s through node %s (%s, price %d against %d)",
			a.Keeps.ID, a.Keeps.Node, a.Keeps.Country, a.Keeps.Price, a.Route.Price)
	default:
		b.WriteString(a.Reason.String())
	}
	return b.String()
}

// Plan is the outcome of one plan round for one node.
type Plan struct {
	Node string    `json:"node"`
	At   time.Time `json:"at"`
	// Actions are the routes to close, unused ones first (longest unused
	// first), then at most one route in use.
	Actions []Action `json:"actions"`
	// State is the node's state after the round: store it as the node's
	// State for the next round, whether or not the actions are carried
	// out.
	State NodeState `json:"state"`
}

// Plan decides which of the node's routes to close at now. routes are the
// node's live routes (each with Node == n.ID); alts answers whether a
// route's user holds the same route elsewhere (nil: nobody does, so no
// route in use is closed). The rules, from the seed:
//
//   - A node that is neither overloaded nor paused loses nothing. A full
//     node (max_users) is not overloaded, and MaxUsers plays no part here.
//   - Overloaded exit, not paused: users' own routes unused for UnusedAfter
//     (2 h) are closed, longest unused first, within a budget of
//     UnusedPerHour (5 %) of the node's sessions (len(routes)) an hour.
//     The budget is a token bucket in n.State: it starts with one token,
//     grows only while this rule applies (an overloaded exit, not paused),
//     holds at most one hour's worth (at least one token), and is spent
//     one token per closed route. The budget follows time, not the number
//     of plans: planning every second closes no more than planning every
//     five minutes or every hour. Partner and extra-link routes are left.
//   - Overloaded entry: nothing unused is closed.
//   - Paused node, of either role: every route unused for UnusedAfter, of
//     any kind, is closed at once, longest unused first.
//   - Routes in use (not unused): once the overload has lasted MoveAfter
//     (15 min) — or at once on a paused node — and while memory is above
//     MoveMemoryPercent (80), at most one route is closed per MoveEvery
//     (5 min), and only a route for which alts returns an alternative (see
//     [IsAlternative]). The one chosen is the one that moved traffic least
//     recently (then by ID). On a node that is overloaded but not paused
//     only users' own routes are moved, since partner and extra-link routes
//     "would be set up again on the same node"; a paused node moves routes
//     of any kind.
//
// A route in use without an alternative — its user's only route — is never
// closed. Plan does not modify routes, and takes route IDs as unique.
// Between plans of different nodes the platform must carry out (or at
// least record, e.g. [Index.Remove]) the closures, or two nodes may each
// close the route the other counted on.
func (p Policy) Plan(now time.Time, n Node, routes []Route, alts Alternatives) (Plan, error) {
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	if err := n.validate(); err != nil {
		return Plan{}, err
	}
	if !representable(now) {
		return Plan{}, fmt.Errorf("routing: plan node %q at %v: out of range: %w", n.ID, now, ErrInvalid)
	}
	st := n.State
	if now.Before(st.PlannedAt) {
		return Plan{}, fmt.Errorf("routing: plan node %q at %v: the previous plan was at %v: %w",
			n.ID, now, st.PlannedAt, ErrOutOfOrder)
	}
	pl := planner{p: p, now: now, n: &n, routes: routes}
	// The unused budget of an overloaded exit: how many may go now.
	budget := 0
	if !n.Paused && n.Overloaded() && n.Role == RoleExit {
		st.UnusedTokens = p.refill(st.UnusedTokens, st.UnusedAccrued, n.OverloadedSince, now, len(routes))
		st.UnusedAccrued = now
		// The epsilon absorbs the rounding of many small additions, so
		// that twelve 30-second rounds at ten an hour make one token.
		budget = int(st.UnusedTokens + 1e-9)
	}
	moves := alts != nil && pl.movesAllowed() && (st.LastMove.IsZero() || now.Sub(st.LastMove) >= p.moveEvery())
	if err := pl.collect(n.Paused || budget > 0, moves); err != nil {
		return Plan{}, err
	}
	switch {
	case n.Paused:
		// Every unused route goes at once, room made for a move too.
		pl.actions = make([]Action, 0, len(pl.unused)+1)
		pl.closeUnused(len(pl.unused), ReasonDrain)
	case budget > 0:
		closed := pl.closeUnused(budget, ReasonUnused)
		st.UnusedTokens = max(0, st.UnusedTokens-float64(closed))
	}
	if moves {
		moved, err := pl.move(alts)
		if err != nil {
			return Plan{}, err
		}
		if moved {
			st.LastMove = now
		}
	}
	st.PlannedAt = now
	return Plan{Node: n.ID, At: now, Actions: pl.actions, State: st}, nil
}

func (n *Node) validate() error {
	switch {
	case n.ID == "":
		return fmt.Errorf("routing: node without an ID: %w", ErrInvalid)
	case n.Role != RoleEntry && n.Role != RoleExit:
		return fmt.Errorf("routing: node %q: role %v is neither entry nor exit: %w", n.ID, n.Role, ErrInvalid)
	case math.IsNaN(n.MemoryPercent) || n.MemoryPercent < 0 || n.MemoryPercent > 100:
		return fmt.Errorf("routing: node %q: memory at %v %%, want 0 to 100: %w", n.ID, n.MemoryPercent, ErrInvalid)
	case math.IsNaN(n.State.UnusedTokens) || math.IsInf(n.State.UnusedTokens, 0) || n.State.UnusedTokens < 0:
		return fmt.Errorf("routing: node %q: state holds %v unused tokens: %w", n.ID, n.State.UnusedTokens, ErrInvalid)
	}
	return nil
}

// representable: t has a Unix time in nanoseconds (years 1678 to 2262).
func representable(t time.Time) bool {
	const limit = math.MaxInt64 / int64(time.Second)
	s := t.Unix()
	return s > -limit && s < limit
}

func validRoute(r *Route, node string) error {
	switch {
	case r.ID == "":
		return fmt.Errorf("routing: plan node %q: a route without an ID: %w", node, ErrInvalid)
	case r.Node != node:
		return fmt.Errorf("routing: plan node %q: route %q goes through node %q: %w", node, r.ID, r.Node, ErrInvalid)
	case r.User == "":
		return fmt.Errorf("routing: plan node %q: route %q has no user: %w", node, r.ID, ErrInvalid)
	case !r.Kind.valid():
		return fmt.Errorf("routing: plan node %q: route %q: unknown kind %v: %w", node, r.ID, r.Kind, ErrInvalid)
	case r.Start.IsZero():
		return fmt.Errorf("routing: plan node %q: route %q has no start: %w", node, r.ID, ErrInvalid)
	case !representable(r.Start) || !representable(r.LastTraffic) && !r.LastTraffic.IsZero():
		return fmt.Errorf("routing: plan node %q: route %q: start %v or last traffic %v out of range: %w",
			node, r.ID, r.Start, r.LastTraffic, ErrInvalid)
	}
	return nil
}

// planner is one plan round's working set.
type planner struct {
	p      Policy
	now    time.Time
	n      *Node
	routes []Route
	// unused and movable are the candidates for the unused rules and for
	// moves, collected in one pass, in a single allocation.
	unused, movable []candidate
	actions         []Action
}

// candidate is a route's position with its last use in Unix nanoseconds:
// small, so the rules work on a compact slice, not on the routes.
type candidate struct {
	i    int32
	last int64
}

// collect checks every route and sorts the candidates out: if unused,
// unused routes the node's unused rule may close (any kind on a paused
// node, users' own otherwise); if moves, routes in use that may be moved
// (users' own unless the node is paused).
func (pl *planner) collect(unused, moves bool) error {
	n := len(pl.routes)
	if n > math.MaxInt32 {
		return fmt.Errorf("routing: plan node %q: %d routes, more than one node can hold: %w", pl.n.ID, n, ErrInvalid)
	}
	var buf []candidate
	if unused || moves {
		buf = make([]candidate, n)
	}
	cut := pl.now.Add(-pl.p.unusedAfter()).UnixNano()
	u, m := 0, n
	for i := range pl.routes {
		r := &pl.routes[i]
		if err := validRoute(r, pl.n.ID); err != nil {
			return err
		}
		if buf == nil {
			continue
		}
		c := candidate{int32(i), r.lastUse().UnixNano()}
		switch {
		case c.last <= cut:
			if unused && (pl.n.Paused || r.Kind == KindOwn) {
				buf[u] = c
				u++
			}
		case moves && (pl.n.Paused || r.Kind == KindOwn):
			m--
			buf[m] = c
		}
	}
	if buf != nil {
		pl.unused, pl.movable = buf[:u:u], buf[m:]
	}
	return nil
}

// before orders routes for closing: the longest unused first, then by ID.
func (pl *planner) before(a, b candidate) int {
	if c := cmp.Compare(a.last, b.last); c != 0 {
		return c
	}
	return strings.Compare(pl.routes[a.i].ID, pl.routes[b.i].ID)
}

func (pl *planner) add(c candidate, why Reason, keeps Route) {
	if pl.actions == nil {
		pl.actions = make([]Action, 0, 2)
	}
	pl.actions = append(pl.actions, Action{Route: pl.routes[c.i], Reason: why,
		SinceTraffic: time.Duration(pl.now.UnixNano() - c.last), Keeps: keeps})
}

// refill returns the unused-route bucket's level at now: one token the
// first time, then UnusedPerHour of the node's sessions an hour since it
// last grew (not counting time before the current overload), at most one
// hour's worth and at least one token.
func (p Policy) refill(tokens float64, accrued, overloadedSince, now time.Time, sessions int) float64 {
	perHour := p.unusedPerHour() * float64(sessions)
	if accrued.IsZero() {
		tokens = 1
	} else {
		from := accrued
		if from.Before(overloadedSince) {
			from = overloadedSince // nothing grows between overloads
		}
		if d := now.Sub(from); d > 0 {
			tokens += perHour * d.Hours()
		}
	}
	return min(tokens, max(1, perHour))
}

// closeUnused closes the k longest-unused candidates, or all of them if
// there are fewer, for the reason why (ReasonUnused within an overloaded
// exit's budget, ReasonDrain for all of a paused node's), and returns how
// many it closed.
func (pl *planner) closeUnused(k int, why Reason) int {
	k = min(k, len(pl.unused))
	if k > 4 {
		slices.SortFunc(pl.unused, pl.before)
	} else {
		// Few to pick, the usual case: k passes over the candidates.
		for j := range k {
			best := j
			for x := j + 1; x < len(pl.unused); x++ {
				if pl.before(pl.unused[x], pl.unused[best]) < 0 {
					best = x
				}
			}
			pl.unused[j], pl.unused[best] = pl.unused[best], pl.unused[j]
		}
	}
	for _, c := range pl.unused[:k] {
		pl.add(c, why, Route{})
	}
	return k
}

// movesAllowed: routes in use are moved while memory is above the mark,
// on a paused node, or on one whose overload has lasted MoveAfter.
func (pl *planner) movesAllowed() bool {
	if pl.n.MemoryPercent <= pl.p.moveMemoryPercent() {
		return false
	}
	if pl.n.Paused {
		return true
	}
	return pl.n.Overloaded() && pl.now.Sub(pl.n.OverloadedSince) >= pl.p.moveAfter()
}

// move closes the route in use that moved traffic least recently among
// those whose user holds an alternative. The candidates come off a heap
// in that order, and the store is asked only until one has an alternative:
// linear in the routes, plus a lookup and a log n pop per candidate tried.
func (pl *planner) move(alts Alternatives) (bool, error) {
	h := pl.movable
	for i := len(h)/2 - 1; i >= 0; i-- {
		pl.siftDown(h, i)
	}
	for len(h) > 0 {
		c := h[0]
		h[0] = h[len(h)-1]
		h = h[:len(h)-1]
		pl.siftDown(h, 0)

		r := &pl.routes[c.i]
		alt, ok := alts.Alternative(*r)
		if !ok {
			continue
		}
		if !IsAlternative(*r, alt) {
			return false, fmt.Errorf("routing: plan node %q: alternatives returned route %q (user %q, key %q, node %q, %s, price %d) for route %q (user %q, key %q, %s, price %d), which is not one: %w",
				pl.n.ID, alt.ID, alt.User, alt.Key, alt.Node, alt.Country, alt.Price, r.ID, r.User, r.Key, r.Country, r.Price, ErrInvalid)
		}
		pl.add(c, ReasonMove, alt)
		return true, nil
	}
	return false, nil
}

// siftDown restores the min-heap (by before) below position i.
func (pl *planner) siftDown(h []candidate, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && pl.before(h[r], h[l]) < 0 {
			m = r
		}
		if pl.before(h[m], h[i]) >= 0 {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
