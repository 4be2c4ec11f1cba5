package routing

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/proofkit/nodekit/pricing"
)

// Role is what a node is in a route: the entry a user connects to, or the
// exit the traffic leaves from.
type Role uint8

// The roles. The zero Role is invalid, so a node whose role was never set
// is refused by [Policy.Plan] rather than taken for an entry or an exit.
const (
	RoleEntry Role = iota + 1
	RoleExit
)

var roleNames = [...]string{RoleEntry: "entry", RoleExit: "exit"}

// String returns "entry" or "exit".
func (r Role) String() string {
	if r == RoleEntry || r == RoleExit {
		return roleNames[r]
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// MarshalText makes a Role travel as "entry" or "exit" in JSON.
func (r Role) MarshalText() ([]byte, error) {
	if r != RoleEntry && r != RoleExit {
		return nil, fmt.Errorf("routing: marshal role %d: %w", uint8(r), ErrInvalid)
	}
	return []byte(roleNames[r]), nil
}

// UnmarshalText reads "entry" or "exit".
func (r *Role) UnmarshalText(b []byte) error {
	switch string(b) {
	case "entry":
		*r = RoleEntry
	case "exit":
		*r = RoleExit
	default:
		return fmt.Errorf("routing: unmarshal role %q: want entry or exit: %w", b, ErrInvalid)
	}
	return nil
}

// Kind says on whose behalf a route was set up. It matters because the
// operators' help page leaves the routes of a partner's subscription and
// of an account's extra links alone while a node is overloaded: "they
// would be set up again on the same node".
type Kind uint8

// The kinds. The zero Kind is invalid.
const (
	// KindOwn is a user's own route.
	KindOwn Kind = iota + 1
	// KindPartner is a route of a partner's subscription.
	KindPartner
	// KindExtraLink is a route of an account's extra links.
	KindExtraLink
)

var kindNames = [...]string{KindOwn: "own", KindPartner: "partner", KindExtraLink: "extra-link"}

func (k Kind) valid() bool { return k >= KindOwn && k <= KindExtraLink }

// String returns "own", "partner" or "extra-link".
func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// MarshalText makes a Kind travel as "own", "partner" or "extra-link".
func (k Kind) MarshalText() ([]byte, error) {
	if !k.valid() {
		return nil, fmt.Errorf("routing: marshal kind %d: %w", uint8(k), ErrInvalid)
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText reads "own", "partner" or "extra-link".
func (k *Kind) UnmarshalText(b []byte) error {
	for i, name := range kindNames {
		if i > 0 && name == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("routing: unmarshal kind %q: want own, partner or extra-link: %w", b, ErrInvalid)
}

// Node is what the platform knows of one node when it decides whether the
// node takes new connections and which of its routes to close.
type Node struct {
	ID      string `json:"id"`
	Role    Role   `json:"role"`
	Country string `json:"country"`
	// Price is the node's asking price now. New sessions lock it; the
	// rules here compare what routes' users pay (Route.Price), not this
	// one.
	Price pricing.Price `json:"price"`
	// Paused: the platform has paused routing to the node; it is being
	// emptied until the platform approves it again.
	Paused bool `json:"paused"`
	// MaxUsers is the operator's cap (0: no cap); LiveUsers the users the
	// node carries now. A node whose cap is filled takes nobody new, but
	// it is not overloaded: no notice, no event, no route closed.
	MaxUsers  int `json:"max_users"`
	LiveUsers int `json:"live_users"`
	// Sessions is the number of sessions the node carries: the base of
	// "about 5 % of the node's sessions an hour" for unused routes. Zero
	// means the routes given to [Policy.Plan], which is right when they
	// are all of the node's routes; set it when Plan is given only some
	// of them (e.g. only the candidates), or the rate changes with them.
	Sessions int `json:"sessions,omitempty"`
	// OverloadedSince is the start of the current overload (the overload
	// package's Start event, or Tracker.Since while Tracker.Overloaded);
	// zero when the node is not overloaded.
	OverloadedSince time.Time `json:"overloaded_since,omitzero"`
	// OverloadEnded is the end of the last overload (the overload
	// package's End event); zero if there was none. The cool-down runs
	// from it.
	OverloadEnded time.Time `json:"overload_ended,omitzero"`
	// MemoryPercent is memory used in the latest reading, 0 to 100.
	MemoryPercent float64 `json:"memory_percent"`
	// State is what [Policy.Plan] carries from one round to the next;
	// store the Plan's State back here. The zero value is a fresh node.
	State NodeState `json:"state"`
}

// Validate reports the first field of n that cannot be true, in an error
// that wraps [ErrInvalid] and names the field: no ID, a role that is
// neither entry nor exit, memory outside 0 to 100 %, a negative MaxUsers,
// LiveUsers or Sessions, or a State that says something happened after
// its own PlannedAt (see [NodeState]). [Policy.Admit] and [Policy.Plan]
// call it.
func (n Node) Validate() error {
	bad := func(field string, format string, args ...any) error {
		return fmt.Errorf("routing: node %q: %s %s: %w", n.ID, field, fmt.Sprintf(format, args...), ErrInvalid)
	}
	switch {
	case n.ID == "":
		return fmt.Errorf("routing: node: ID is empty: %w", ErrInvalid)
	case n.Role != RoleEntry && n.Role != RoleExit:
		return bad("Role", "is %v, neither entry nor exit", n.Role)
	case math.IsNaN(n.MemoryPercent) || n.MemoryPercent < 0 || n.MemoryPercent > 100:
		return bad("MemoryPercent", "is %v, want 0 to 100", n.MemoryPercent)
	case n.MaxUsers < 0:
		return bad("MaxUsers", "is %d, below zero", n.MaxUsers)
	case n.LiveUsers < 0:
		return bad("LiveUsers", "is %d, below zero", n.LiveUsers)
	case n.Sessions < 0:
		return bad("Sessions", "is %d, below zero", n.Sessions)
	case n.State.Period < 0:
		return bad("State.Period", "is %v, below zero", n.State.Period)
	case n.State.LastMove.After(n.State.PlannedAt):
		return bad("State.LastMove", "is %v, after the state's PlannedAt %v", n.State.LastMove, n.State.PlannedAt)
	}
	return nil
}

// Overloaded reports whether the node is overloaded.
func (n Node) Overloaded() bool { return !n.OverloadedSince.IsZero() }

// Route is one route a user holds through a node.
type Route struct {
	ID   string `json:"id"`
	User string `json:"user"`
	// Key is what makes two routes "the same route": two routes of one
	// user with equal keys carry the same thing (for a VPN, the same
	// exit country and purpose), so the user can go on through either.
	Key string `json:"key"`
	// Node is the node the route goes through; Country that node's
	// country.
	Node    string `json:"node"`
	Country string `json:"country"`
	// Price is what the user pays for the route at the plan's time: its
	// session's price then (pricing's History.SessionPrice), which is
	// the price it locked unless a drop has reached it. Give that, not
	// the locked price: "at the same price or less" compares what the
	// user pays now, and comparing locked prices could move a user whose
	// price a drop has lowered onto a copy that costs more.
	Price pricing.Price `json:"price"`
	Kind  Kind          `json:"kind"`
	// LastTraffic is the last time the route moved traffic; zero if it
	// never did, in which case it counts as unused since Start.
	LastTraffic time.Time `json:"last_traffic,omitzero"`
	Start       time.Time `json:"start"`
}

// lastUse is when the route last moved traffic, or its start if it never
// did.
func (r *Route) lastUse() time.Time {
	if r.LastTraffic.After(r.Start) {
		return r.LastTraffic
	}
	return r.Start
}

// NodeState is what carries over between plan rounds for one node: the
// pacing of closures. It is a plain value that marshals to JSON, so the
// platform keeps one per node in its own store. The zero value is a fresh
// node.
//
// Plan refuses a state that says something happened after its own
// PlannedAt (LastMove), which no plan writes: a stored last_move in 2126
// would otherwise block moves for a century. UnusedDue is in the future
// by nature; Plan brings one that lies more than one closure interval
// after now back to that.
//
// A store that writes a node's state only when it changed may leave out a
// change of PlannedAt and Period alone: the next plan then sees a longer
// gap, which saves nothing up.
type NodeState struct {
	// PlannedAt is the time of the last plan. A plan for an earlier
	// time (a clock that stepped back) takes the state's later times as
	// its own (see [Policy.Plan]).
	PlannedAt time.Time `json:"planned_at,omitzero"`
	// Period is the time between the node's last two plans (zero until
	// there were two): how far the pace of unused closures may fall
	// behind across the next gap, an overload's first plan's included.
	Period time.Duration `json:"period_ns,omitzero"`
	// UnusedDue paces the closing of unused routes on an overloaded
	// exit: the next may be closed at this time, and each closure moves
	// it on by one interval (an hour divided by Policy.UnusedPerHour of
	// the node's sessions). Plan never lets it lag behind now by more
	// than the time since the last plan, nor by more than Period or an
	// hour, nor start before the current overload, and brings it up to
	// now when a plan had nothing more to close, so nothing is saved up.
	UnusedDue time.Time `json:"unused_due,omitzero"`
	// UnusedRecent is read from states stored by earlier versions, which
	// held each plan's closures of the last five minutes here.
	//
	// Deprecated: Plan ignores it and returns it empty; the pace alone
	// keeps a plan to what its period earns, plus one.
	UnusedRecent []Closures `json:"unused_recent,omitempty"`
	// LastMove is when a route in use was last closed; the next may go
	// Policy.MoveEvery later.
	LastMove time.Time `json:"last_move,omitzero"`
}

// Closures is how many unused routes one plan closed, and when, as states
// stored by earlier versions hold them ([NodeState].UnusedRecent).
type Closures struct {
	At    time.Time `json:"at"`
	Count int       `json:"count"`
}

// Equal reports whether s and t hold the same times and closures.
func (s NodeState) Equal(t NodeState) bool {
	return s.PlannedAt.Equal(t.PlannedAt) && s.Period == t.Period && s.UnusedDue.Equal(t.UnusedDue) && s.LastMove.Equal(t.LastMove) &&
		slices.EqualFunc(s.UnusedRecent, t.UnusedRecent, func(a, b Closures) bool {
			return a.At.Equal(b.At) && a.Count == b.Count
		})
}
