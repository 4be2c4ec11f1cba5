package routing

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Alternatives is what the move rule needs of the platform's store of
// routes: whether a route's user holds the same route elsewhere, and what
// earlier plans decided. The platform implements it over its own data;
// [Index] is an in-memory implementation.
type Alternatives interface {
	// Alternative returns a route that r's user holds with r's key
	// through a node other than r.Node, in r.Country, at r.Price or less
	// (see [IsAlternative]), and whether there is one. Routes already
	// closed, or recorded as closed, must not be returned.
	Alternative(r Route) (Route, bool)
	// Record is told of every action of a plan, by [Policy.Plan] itself
	// before it returns: from then on a.Route must not be returned as an
	// alternative, and for a move (ReasonMove), ReliedOn(a.Keeps) must
	// return at (or a later time of a later move). A store that a plan
	// outlives (one built per round) must keep this in the platform's
	// own data, or a later round undoes it.
	Record(at time.Time, a Action)
	// ReliedOn returns when a move last relied on route r (the latest at
	// given to Record with r, found by its ID, as a.Keeps), or the zero
	// time if none did. For UnusedAfter from then on, Plan counts r as in
	// use, whatever its traffic, and does not move it either: the user
	// moved onto it is about to send traffic through it.
	ReliedOn(r Route) time.Time
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
	// Keeps, for ReasonMove, is the route the user goes on through: the
	// alternative the move relies on. Plan has recorded it in its
	// Alternatives (Record), and from the move on it counts as in use
	// for UnusedAfter ([Alternatives.ReliedOn]). A platform whose store
	// is rebuilt between rounds keeps the move's time with this route.
	Keeps Route `json:"keeps,omitzero"`
}

// String says what to do and why, e.g. "close route r17 of user u3:
// unused for 2h30m; unused own route on an overloaded exit". How long the
// route was unused is rounded down for a reader: to the minute from an
// hour on, with days from a day on ("31d22h19m"), to the second below.
func (a Action) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "close route %s of user %s: ", a.Route.ID, a.Route.User)
	switch a.Reason {
	case ReasonUnused, ReasonDrain:
		b.WriteString("unused for ")
		writeDuration(&b, a.SinceTraffic)
		fmt.Fprintf(&b, "; %v", a.Reason)
	case ReasonMove:
		fmt.Fprintf(&b, "in use; the user keeps route %s through node %s (%s, price %d against %d)",
			a.Keeps.ID, a.Keeps.Node, a.Keeps.Country, a.Keeps.Price, a.Route.Price)
	default:
		b.WriteString(a.Reason.String())
	}
	return b.String()
}

// writeDuration writes d for a reader, rounded down: to the minute from an
// hour on, with days from a day on ("31d22h19m" for 766h19m31.15s,
// "2h0m"), to the second below ("45m10s").
func writeDuration(b *strings.Builder, d time.Duration) {
	if d < 0 {
		b.WriteByte('-')
		d = -max(d, -math.MaxInt64)
	}
	if d < time.Hour {
		b.WriteString(d.Truncate(time.Second).String())
		return
	}
	m := int64(d / time.Minute)
	if days := m / (24 * 60); days > 0 {
		fmt.Fprintf(b, "%dd", days)
	}
	fmt.Fprintf(b, "%dh%dm", m/60%24, m%60)
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
	// out, and before carrying them out, so that a round repeated after
	// a crash closes nothing the pace has not reached since.
	State NodeState `json:"state"`
}

// Plan decides which of the node's routes to close at now. routes are the
// node's live routes (each with Node == n.ID); n.Sessions, if set, is how
// many sessions the node carries when routes are only some of them. alts
// answers whether a route's user holds the same route elsewhere (nil:
// nobody does, so no route in use is closed, and no move relies on any
// route). The rules of the operators' help page:
//
//   - A node that is neither overloaded nor paused loses nothing. A full
//     node (max_users) is not overloaded, and MaxUsers plays no part here.
//   - Overloaded exit, not paused: users' own routes unused for UnusedAfter
//     (2 h) are closed, longest unused first, "a few at a time … about 5 %
//     of the node's sessions an hour": UnusedPerHour of the sessions
//     (n.Sessions, or len(routes) when it is zero) an hour, whatever the
//     plan period from a second up to an hour, and no plan more than the
//     time since the plan before earns at that rate, plus one (1,000
//     sessions planned every 10 minutes: 50 an hour, 8 or 9 a plan). The
//     pace follows time, not the number of plans, and starts at the
//     overload's start (n.OverloadedSince): an overload's first plan
//     closes what the time since then earns, plus one, so its first hour
//     closes about 5 % at any period. Nothing is saved up: not while there
//     was nothing to close, not across a gap between plans longer than the
//     period planned before it (a platform that stopped for an hour goes
//     on at the pace it had), and not from one overload to the next. A
//     node never planned before has no plan before to bound its first
//     plan, which closes one. Its state is n.State (see [NodeState]).
//     Plans more than an hour apart are held to an hour's worth each, so
//     they close less in an hour. Partner and extra-link routes are left.
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
//   - The route a move relies on (Action.Keeps) counts as in use from the
//     move on: for UnusedAfter after it, no plan closes it as unused,
//     drains it or moves it ([Alternatives.ReliedOn]).
//
// A route in use without an alternative — its user's only route — is never
// closed. Plan does not modify routes, and takes route IDs as unique.
// Before it returns, Plan records each action with alts.Record, so the
// next node's plan neither moves a user onto a route just closed nor closes
// the route a move relies on: plan the nodes one after another over the
// same alts. A Node that [Node.Validate] refuses is an error wrapping
// [ErrInvalid].
//
// A plan for a time before the State's PlannedAt (the platform's clock
// stepped back, or a round is replayed) is planned, not refused: the
// state's times after now (PlannedAt, LastMove) are taken as now, so the
// next move waits a whole MoveEvery, and the next unused route waits for
// its turn, at most one interval (an hour over the hourly figure) from
// now. The rules hold in real time across the step, and a node whose
// clock once ran ahead (a state planned in 2126) is not left unplanned
// until the clock catches up. A step forward is a gap between plans: it
// saves nothing up either.
func (p Policy) Plan(now time.Time, n Node, routes []Route, alts Alternatives) (Plan, error) {
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	if err := n.Validate(); err != nil {
		return Plan{}, err
	}
	if !representable(now) {
		return Plan{}, fmt.Errorf("routing: plan node %q at %v: out of range: %w", n.ID, now, ErrInvalid)
	}
	st := n.State
	if now.Before(st.PlannedAt) {
		// The clock stepped back (or a round is replayed): what the state
		// says happened later happened, as far as the rules go, now.
		st = st.backTo(now)
	}
	sessions := n.Sessions
	if sessions == 0 {
		sessions = len(routes)
	} else if sessions < len(routes) {
		return Plan{}, fmt.Errorf("routing: plan node %q: Sessions is %d, fewer than the %d routes given: %w",
			n.ID, sessions, len(routes), ErrInvalid)
	}
	pl := planner{p: p, now: now, n: &n, routes: routes, alts: alts}
	st.UnusedRecent = nil
	// The pace of an overloaded exit: how many unused routes may go now.
	var pace unusedPace
	paced := !n.Paused && n.Overloaded() && n.Role == RoleExit
	if paced {
		pace = p.unusedPace(st, now, n.OverloadedSince, sessions)
	}
	moves := alts != nil && pl.movesAllowed() && (st.LastMove.IsZero() || now.Sub(st.LastMove) >= p.moveEvery())
	if err := pl.collect(n.Paused || pace.allowed > 0, moves); err != nil {
		return Plan{}, err
	}
	switch {
	case n.Paused:
		// Every unused route goes at once, room made for a move too.
		pl.actions = make([]Action, 0, len(pl.unused)+1)
		pl.closeUnused(len(pl.unused), ReasonDrain)
	case paced:
		closed := 0
		if pace.allowed > 0 {
			closed = pl.closeUnused(pace.allowed, ReasonUnused)
		}
		st = pace.after(st, now, closed)
	}
	if moves {
		moved, err := pl.move()
		if err != nil {
			return Plan{}, err
		}
		if moved {
			st.LastMove = now
		}
	}
	if gap := now.Sub(st.PlannedAt); !st.PlannedAt.IsZero() && gap > 0 {
		st.Period = gap
	}
	st.PlannedAt = now
	if alts != nil {
		for _, a := range pl.actions {
			alts.Record(now, a)
		}
	}
	return Plan{Node: n.ID, At: now, Actions: pl.actions, State: st}, nil
}

// maxPlanPeriod is the longest plan period the pace keeps up with: a plan
// may close what the time since the plan before earns, up to this much
// time's worth: the hourly figure itself, which a platform planning every
// hour closes at once.
const maxPlanPeriod = time.Hour

// unusedPace is one plan's pacing of unused closures on an overloaded
// exit.
type unusedPace struct {
	interval time.Duration // between two closures: an hour / rate
	due      time.Time     // the pace's next closure, brought into range
	allowed  int           // how many may close now: those due
}

// unusedPace returns how many unused routes may close at now: those whose
// turn (due, then one interval after another) is not after now, counting
// from no earlier than the overload's start and than the time the pace
// may lag behind now ([NodeState.lag]).
func (p Policy) unusedPace(st NodeState, now, since time.Time, sessions int) unusedPace {
	rate := p.unusedPerHour() * float64(sessions)
	if rate <= 0 {
		return unusedPace{}
	}
	// At most 100,000 hours: a rate too small to close one route in a
	// lifetime, and still a Duration.
	iv := time.Duration(min(float64(time.Hour)/rate, float64(100_000*time.Hour)))
	due := st.UnusedDue
	if from := now.Add(-st.lag(now, since)); due.Before(from) {
		due = from
	}
	if due.Before(since) {
		due = since
	}
	if latest := now.Add(iv); due.After(latest) {
		due = latest
	}
	pc := unusedPace{interval: iv, due: due}
	if !due.After(now) {
		pc.allowed = int(now.Sub(due)/iv) + 1
	}
	return pc
}

// lag is how far the pace's next turn may lie behind now: no further
// back than the last plan (a plan closes what the time since the one
// before earns), than the overload's start (nothing is saved up from
// before it), than the period planned before (nothing is saved up across
// a longer gap: a platform that stopped, a clock that stepped forward),
// nor than maxPlanPeriod. Planning at a steady period, the pace is never
// behind the last plan and no bound binds but the overload's start at
// its first plan: that plan closes what the time since the start earns,
// and every later plan what its period earns. A node never planned
// before (or whose state was lost) has no plan before to bound its first
// plan: none.
func (st NodeState) lag(now, since time.Time) time.Duration {
	if st.PlannedAt.IsZero() || !now.After(st.PlannedAt) {
		return 0
	}
	lag := min(now.Sub(st.PlannedAt), now.Sub(since), maxPlanPeriod)
	if st.Period > 0 {
		lag = min(lag, st.Period)
	}
	return max(lag, 0)
}

// after returns the state once closed routes went: the pace moves on one
// interval a route, and up to now if the plan closed fewer than were
// allowed for want of routes to close (nothing is saved up).
func (pc unusedPace) after(st NodeState, now time.Time, closed int) NodeState {
	if pc.interval == 0 {
		return st
	}
	due := pc.due.Add(time.Duration(closed) * pc.interval)
	if closed < pc.allowed && due.Before(now) {
		due = now
	}
	st.UnusedDue = due
	return st
}

// backTo returns the state with every time after now taken as now: a
// clock that stepped back to now.
func (st NodeState) backTo(now time.Time) NodeState {
	st.PlannedAt = now
	if st.LastMove.After(now) {
		st.LastMove = now
	}
	return st
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
	alts   Alternatives
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

// relied reports whether a move relied on the route less than UnusedAfter
// ago, so it counts as in use and is not moved either.
func (pl *planner) relied(c candidate) bool {
	if pl.alts == nil {
		return false
	}
	at := pl.alts.ReliedOn(pl.routes[c.i])
	return !at.IsZero() && pl.now.Sub(at) < pl.p.unusedAfter()
}

// closeUnused closes the k longest-unused candidates that no move relies
// on, or all of them if there are fewer, for the reason why (ReasonUnused
// within an overloaded exit's pace, ReasonDrain for all of a paused
// node's), and returns how many it closed.
func (pl *planner) closeUnused(k int, why Reason) int {
	slices.SortFunc(pl.unused, pl.before)
	closed := 0
	for _, c := range pl.unused {
		if closed == k {
			break
		}
		if pl.relied(c) {
			continue
		}
		pl.add(c, why, Route{})
		closed++
	}
	return closed
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
func (pl *planner) move() (bool, error) {
	h := &candidates{pl: pl, c: pl.movable}
	heap.Init(h)
	for h.Len() > 0 {
		c := heap.Pop(h).(candidate)
		if pl.relied(c) {
			continue
		}
		r := &pl.routes[c.i]
		alt, ok := pl.alts.Alternative(*r)
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

// candidates is a min-heap of candidates by [planner.before].
type candidates struct {
	pl *planner
	c  []candidate
}

func (h *candidates) Len() int           { return len(h.c) }
func (h *candidates) Less(i, j int) bool { return h.pl.before(h.c[i], h.c[j]) < 0 }
func (h *candidates) Swap(i, j int)      { h.c[i], h.c[j] = h.c[j], h.c[i] }
func (h *candidates) Push(x any)         { h.c = append(h.c, x.(candidate)) }
func (h *candidates) Pop() any {
	c := h.c[len(h.c)-1]
	h.c = h.c[:len(h.c)-1]
	return c
}
