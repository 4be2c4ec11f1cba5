package routing

import (
	"fmt"
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
// seed leaves the routes of a partner's subscription and of an account's
// extra links alone while a node is overloaded: "they would be set up
// again on the same node".
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
	// rules here compare the prices routes locked (Route.Price), not this
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
	// Price is what the user pays for the route: the price its session
	// locked (see the pricing package).
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
// budgets. It is a plain value that marshals to JSON, so the platform keeps
// one per node in its own store. The zero value is a fresh node.
type NodeState struct {
	// PlannedAt is the time of the last plan; a plan for an earlier
	// time is refused with [ErrOutOfOrder].
	PlannedAt time.Time `json:"planned_at,omitzero"`
	// UnusedTokens is the budget for closing unused routes on an
	// overloaded exit: one token closes one route. It grows at
	// Policy.UnusedPerHour of the node's sessions an hour while the rule
	// applies, up to one hour's worth, and is kept between overloads.
	UnusedTokens float64 `json:"unused_tokens,omitzero"`
	// UnusedAccrued is the time up to which UnusedTokens has grown; zero
	// until the rule first applied, and the bucket then starts with one
	// token.
	UnusedAccrued time.Time `json:"unused_accrued,omitzero"`
	// LastMove is when a route in use was last closed; the next may go
	// Policy.MoveEvery later.
	LastMove time.Time `json:"last_move,omitzero"`
}
