package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// MaxClosed, MaxNotices and MaxMarks bound what a node keeps for
// display.
const (
	MaxClosed  = 200
	MaxNotices = 100
	MaxMarks   = 100
)

// The platform's own events in a node's event list, beside the
// tracker's overload starts and ends.
const (
	EventPaused   overload.EventKind = "paused"   // the admin paused routing to the node
	EventApproved overload.EventKind = "approved" // the admin approved it again
)

// NumberedNotice is a notice with its id, which orders GET /notices: in
// JSON, the notice's own fields and "id".
type NumberedNotice struct {
	ID int64 `json:"id"`
	overload.Notice
	Delivery *DeliveryView `json:"delivery,omitempty"` // filled in by withNotify
}

// Node is everything the platform knows of one node.
type Node struct {
	Info       routing.Node // Role zero: not registered (reports only, no plans)
	Tracker    *overload.Tracker
	Prices     *pricing.History
	Routes     map[string]*Route // live routes by ID
	Closed     []ClosedRoute     // newest last, at most MaxClosed
	Notices    []NumberedNotice  // newest last, at most MaxNotices
	LastPlan   *routing.Plan     // the latest plan that closed something
	NextRoute  int               // sequence for route IDs the platform gives out
	Readings   int64             // readings counted (not duplicates, not refused)
	EventsSeen int64             // events the node had, the tracker's and the platform's, kept or not
	Marks      []NumberedEvent   // the platform's own events (paused, approved), newest last, at most MaxMarks
	StartedAt  time.Time         // the overload's start by the platform's clock; zero when not overloaded
	// NoticeCount is how many notices the store keeps of the node
	// beside notices (the PostgreSQL store keeps them in a table), set
	// by its read with history.
	NoticeCount int
	SavedBytes  []byte // the file's content as last written

	// What the change being made decided, for the store to write with
	// it (the store clears them before each change: ClearChange).
	Event     *overload.Event  // the event a reading produced
	Notice    *overload.Notice // the notice a reading sends; the store may refuse it (one an hour)
	Closing   []ClosedRoute    // the routes a plan closed
	Relied    []routing.Route  // routes of other nodes the plan's moves rely on
	Replanned bool             // the plan closed something or moved the budgets on
}

// ClearChange forgets what the last change decided.
func (n *Node) ClearChange() {
	n.Event, n.Notice, n.Closing, n.Relied, n.Replanned = nil, nil, nil, nil, false
}

// Route is a live route with its pricing session and what it has earned.
type Route struct {
	Route   routing.Route   `json:"route"`
	Session pricing.Session `json:"session"`
	Earned  pricing.Charge  `json:"earned"`
	// ReliedOn is when a move on another node last relied on this route
	// (its user was moved onto it). From then on it counts as in use for
	// the unused-route rule: the user is about to send traffic through it.
	ReliedOn time.Time `json:"relied_on,omitzero"`
}

// ClosedRoute is a route the platform closed because a plan said so.
type ClosedRoute struct {
	Action routing.Action `json:"action"`
	At     time.Time      `json:"at"`
	Earned pricing.Charge `json:"earned"`

	Session pricing.Session `json:"-"` // the ended session, for the PostgreSQL store's route row
}

// Errors the HTTP layer maps to status codes.
var (
	ErrUnknown     = errors.New("not found")
	ErrUnknownNode = errors.New("unknown node")
	// ErrNotRegistered: the node reports but is not in the route table,
	// so it has no price, cap, routes or routing to pause until it is.
	ErrNotRegistered = errors.New("not in the route table")
	ErrBadInput      = errors.New("bad input")
	ErrNotAdmit      = errors.New("not admitted")
	ErrDuplicate     = errors.New("already observed")
	ErrStale         = errors.New("older than the latest reading")
	// ErrUnsaved: the node's state could not be saved; only that node's
	// requests fail, and what it was told is what is stored.
	ErrUnsaved = errors.New("node state not saved")
	// ErrUnavailable: the store cannot be reached now (the database is
	// restarting); the request may be retried.
	ErrUnavailable = errors.New("store unavailable")
)

// CheckNodeID checks id by overload.CheckNode, the node-id rule the agent
// checks its own name against too: a node id (a reading's "node", a
// token file's NODE, a route table's node, a path's X) that breaks it is
// refused on every path, read or write. The error wraps ErrBadInput.
func CheckNodeID(id string) error {
	if err := overload.CheckNode(id); err != nil {
		return fmt.Errorf("%w: %w", err, ErrBadInput)
	}
	return nil
}

// ReliesOn is the route a closure relies on, the user's other copy that
// carries the user on; false for an action that relies on none (an unused
// route).
func ReliesOn(a routing.Action) (routing.Route, bool) {
	return a.Keeps, a.Reason == routing.ReasonMove && a.Keeps.ID != ""
}

// LiveUsers is how many users hold a live route through n.
func LiveUsers(n *Node) int {
	users := map[string]bool{}
	for _, rt := range n.Routes {
		users[rt.Route.User] = true
	}
	return len(users)
}

// AppendBounded appends v to s and drops the oldest elements beyond max.
func AppendBounded[T any](s []T, v T, max int) []T {
	s = append(s, v)
	if len(s) > max {
		s = slices.Delete(s, 0, len(s)-max)
	}
	return s
}

// EventPage is one page of a node's events, oldest first; Next, when not
// zero, is the after= of the next page.
type EventPage struct {
	Node   string          `json:"node"`
	Events []NumberedEvent `json:"events"`
	Next   int64           `json:"-"`
}

// NumberedEvent is an event with its place in the node's event list:
// in JSON, the event's own fields and "id".
type NumberedEvent struct {
	ID int64 `json:"id"`
	overload.Event
}

// MarshalJSON writes "id" beside the event's fields. Without it the
// embedded Event's MarshalJSON would be promoted and the id left out.
func (e NumberedEvent) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(e.Event)
	if err != nil {
		return nil, err
	}
	id := fmt.Appendf(nil, `{"id":%d`, e.ID)
	if len(b) < 2 || b[0] != '{' {
		return nil, fmt.Errorf("event %d: encodes as %.20q, not an object", e.ID, b)
	}
	if string(b) == "{}" {
		return append(id, '}'), nil
	}
	return append(append(id, ','), b[1:]...), nil
}

// UnmarshalJSON reads MarshalJSON's encoding.
func (e *NumberedEvent) UnmarshalJSON(b []byte) error {
	var id struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return err
	}
	e.ID = id.ID
	return json.Unmarshal(b, &e.Event)
}

// CheckOperator checks an operator's name: the node-id rule, which a
// log line and a URL carry as they are. The error wraps ErrBadInput.
func CheckOperator(name string) error {
	if overload.CheckNode(name) != nil {
		return fmt.Errorf("operator %.80q: want %s: %w", name, overload.NodeRule, ErrBadInput)
	}
	return nil
}
