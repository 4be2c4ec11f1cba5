package routing

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Errors a caller may branch on. They come wrapped, with context.
var (
	// ErrInvalid: input that cannot be true (a route of another node, an
	// unknown kind, a negative duration in the Policy), or an
	// [Alternatives] answer that is not an alternative.
	ErrInvalid = errors.New("invalid input")
	// ErrOutOfOrder was returned for a plan for a time before the node's
	// previous plan. Plan no longer returns it: a clock that stepped
	// back is planned at the time it gives (see [Policy.Plan]). It is
	// kept for callers that branch on it.
	ErrOutOfOrder = errors.New("plan out of order")
)

// The figures of the operators' help page, used where a Policy field is
// zero.
const (
	DefaultUnusedAfter       = 2 * time.Hour
	DefaultUnusedPerHour     = 0.05
	DefaultMoveAfter         = 15 * time.Minute
	DefaultMoveMemoryPercent = 80.0
	DefaultMoveEvery         = 5 * time.Minute
	// DefaultCoolDown is not a figure of the help page, which says only
	// that "the marketplace waits before offering it again". Ten minutes
	// is twenty readings at the agent's 30-second interval, four whole
	// 3-of-5 windows without an overload, so a node whose overload flaps
	// is not handed new users between two overloads; and it is shorter
	// than the 15 minutes an overload must last before routes in use are
	// moved, so a node that recovered is offered again before the
	// platform would have started moving its users.
	DefaultCoolDown = 10 * time.Minute
)

// Policy holds the rule's durations and rates. The zero value is the
// rules of the operators' help page; a zero field means its default.
type Policy struct {
	// UnusedAfter: a route that moved no traffic for this long is unused
	// (default 2 h).
	UnusedAfter time.Duration
	// UnusedPerHour: the share of an overloaded exit's sessions whose
	// unused routes are closed an hour (default 0.05, "about 5 % of the
	// node's sessions an hour").
	UnusedPerHour float64
	// MoveAfter: how long an overload must have lasted before routes in
	// use are moved (default 15 min). A paused node does not wait.
	MoveAfter time.Duration
	// MoveMemoryPercent: routes in use are moved only while memory is
	// above this (default 80).
	MoveMemoryPercent float64
	// MoveEvery: at most one route in use is closed per this interval
	// (default 5 min).
	MoveEvery time.Duration
	// CoolDown: after an overload ends the node takes nobody new for this
	// long (default 10 min, see [DefaultCoolDown]); negative means no
	// cool-down.
	CoolDown time.Duration
}

func (p Policy) unusedAfter() time.Duration { return orDuration(p.UnusedAfter, DefaultUnusedAfter) }
func (p Policy) moveAfter() time.Duration   { return orDuration(p.MoveAfter, DefaultMoveAfter) }
func (p Policy) moveEvery() time.Duration   { return orDuration(p.MoveEvery, DefaultMoveEvery) }

func (p Policy) unusedPerHour() float64 {
	if p.UnusedPerHour == 0 {
		return DefaultUnusedPerHour
	}
	return p.UnusedPerHour
}

func (p Policy) moveMemoryPercent() float64 {
	if p.MoveMemoryPercent == 0 {
		return DefaultMoveMemoryPercent
	}
	return p.MoveMemoryPercent
}

// OfferedAgain is when a node whose overload ended at ended takes new
// connections again: ended plus the cool-down (CoolDown, or its default;
// ended itself when CoolDown is negative).
func (p Policy) OfferedAgain(ended time.Time) time.Time {
	if p.CoolDown < 0 {
		return ended
	}
	return ended.Add(orDuration(p.CoolDown, DefaultCoolDown))
}

// WithDefaults returns p with each zero field set to its default, the
// figures Plan and Admit use: a caller that needs one of them (a store
// checking, under its own lock, that a route is still unused) reads it
// here rather than resolving the defaults itself. A negative CoolDown
// stays negative (no cool-down).
func (p Policy) WithDefaults() Policy {
	p.UnusedAfter = p.unusedAfter()
	p.UnusedPerHour = p.unusedPerHour()
	p.MoveAfter = p.moveAfter()
	p.MoveMemoryPercent = p.moveMemoryPercent()
	p.MoveEvery = p.moveEvery()
	if p.CoolDown == 0 {
		p.CoolDown = DefaultCoolDown
	}
	return p
}

func orDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Validate reports the first field that cannot be used: a negative
// duration (CoolDown excepted), a share outside [0, 1] or a memory figure
// outside [0, 100].
func (p Policy) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"UnusedAfter", p.UnusedAfter}, {"MoveAfter", p.MoveAfter}, {"MoveEvery", p.MoveEvery}} {
		if f.d < 0 {
			return fmt.Errorf("routing: policy %s is %v, below zero: %w", f.name, f.d, ErrInvalid)
		}
	}
	if math.IsNaN(p.UnusedPerHour) || p.UnusedPerHour < 0 || p.UnusedPerHour > 1 {
		return fmt.Errorf("routing: policy UnusedPerHour is %v, want 0 to 1: %w", p.UnusedPerHour, ErrInvalid)
	}
	if math.IsNaN(p.MoveMemoryPercent) || p.MoveMemoryPercent < 0 || p.MoveMemoryPercent > 100 {
		return fmt.Errorf("routing: policy MoveMemoryPercent is %v, want 0 to 100: %w", p.MoveMemoryPercent, ErrInvalid)
	}
	return nil
}

// Reason says why a node takes nobody new, or why a route is closed. The
// value is a stable token for JSON and logs; String gives it in words.
type Reason string

// Why a node takes nobody new ([Policy.Admit]).
const (
	// ReasonPaused: the platform paused routing to the node.
	ReasonPaused Reason = "paused"
	// ReasonOverloaded: the node is overloaded.
	ReasonOverloaded Reason = "overloaded"
	// ReasonCoolDown: an overload ended less than Policy.CoolDown ago.
	ReasonCoolDown Reason = "cool-down"
	// ReasonFull: the node's max_users is filled by live users. A cap,
	// not an overload: no notice, no event, no cool-down afterwards.
	ReasonFull Reason = "full"
)

// Why a route is closed ([Action]).
const (
	// ReasonUnused: a user's own route that moved no traffic for
	// Policy.UnusedAfter, on an overloaded exit, within the hourly budget.
	ReasonUnused Reason = "unused"
	// ReasonDrain: a route (of any kind) that moved no traffic for
	// Policy.UnusedAfter, on a paused node.
	ReasonDrain Reason = "drain"
	// ReasonMove: a route in use whose user holds the same route through
	// another node of the same country, at the same price or less.
	ReasonMove Reason = "move"
)

// String returns the reason in words.
func (r Reason) String() string {
	switch r {
	case ReasonPaused:
		return "routing to the node is paused by the platform"
	case ReasonOverloaded:
		return "the node is overloaded"
	case ReasonCoolDown:
		return "the node's overload ended recently; the marketplace waits before offering it again"
	case ReasonFull:
		return "the node's max_users is filled with live users (the operator's cap, not an overload)"
	case ReasonUnused:
		return "unused own route on an overloaded exit"
	case ReasonDrain:
		return "unused route on a paused node"
	case ReasonMove:
		return "route in use moved: the user holds the same route through another node of the same country at the same price or less"
	case "":
		return "admitted"
	}
	return string(r)
}

// Admit reports whether the node may be given new connections at now, and
// if not, why. The reasons are checked in this order: paused, overloaded,
// cool-down (an overload ended less than CoolDown before now), full
// (MaxUsers > 0 and LiveUsers >= MaxUsers). A full node is admitted again
// as soon as a user leaves; a node whose pause is lifted at once ("routing
// comes back once the platform approves the node again").
//
// A node that [Node.Validate] refuses is not admitted: Admit returns its
// error, which wraps [ErrInvalid], and no reason.
func (p Policy) Admit(n Node, now time.Time) (bool, Reason, error) {
	if err := n.Validate(); err != nil {
		return false, "", err
	}
	ok, why := p.admit(n, now)
	return ok, why, nil
}

func (p Policy) admit(n Node, now time.Time) (bool, Reason) {
	switch {
	case n.Paused:
		return false, ReasonPaused
	case n.Overloaded():
		return false, ReasonOverloaded
	case !n.OverloadEnded.IsZero() && now.Before(p.OfferedAgain(n.OverloadEnded)):
		return false, ReasonCoolDown
	case n.MaxUsers > 0 && n.LiveUsers >= n.MaxUsers:
		return false, ReasonFull
	}
	return true, ""
}
