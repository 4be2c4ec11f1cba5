package pricing

import (
	"fmt"
	"math"
	"time"
)

// Session is one session (route) on a node, as far as its price goes: when
// it started, the price it locked then, and when it ended, if it has.
//
// It marshals to JSON as {"start", "locked", "end"} ("end" left out while
// the session runs); UnmarshalJSON validates it.
type Session struct {
	// Start is when the session started and locked its price.
	Start time.Time `json:"start"`
	// Locked is the price the session locked. Lock sets it to the price
	// the node asked at Start. A price agreed otherwise may be set
	// instead; the rule then applies as written, so a lower price the
	// node has asked for a whole window, even one that began before Start,
	// reaches the session.
	Locked Price `json:"locked"`
	// End is when the session ended (its route was closed); the zero
	// time while it runs. A closed route earns nothing more: usage after
	// End is refused.
	End time.Time `json:"end,omitzero"`
}

// Lock starts a session at start: it locks the price the node asks then.
func (h *History) Lock(start time.Time) (Session, error) {
	ns, err := toNanos(start)
	if err != nil {
		return Session{}, fmt.Errorf("pricing: lock at %v: %w", start.Round(0), err)
	}
	if h.pruned && ns < h.prunedBefore {
		return Session{}, fmt.Errorf("pricing: lock at %v: history for sessions before %v was pruned: %w",
			start.Round(0), fromNanos(h.prunedBefore), ErrPruned)
	}
	i := h.lastAtOrBefore(ns)
	if i < 0 {
		return Session{}, h.noPrice("lock at", start)
	}
	return Session{Start: start, Locked: h.price[i]}, nil
}

// SessionPrice returns the price of session s at t: the lowest of its
// locked price and, for every instant u of the session so far (Start ≤ u ≤
// t), the highest price the node asked during [u − window, u].
//
// So a rise never reaches the session; a drop reaches it once the lower
// price has stood for the whole window (a drop at 1:00 reaches it at 4:00,
// if the node still asks no more at 4:00); a drop undone within the window
// never reaches it; and the price, once lowered, never rises again.
//
// t must lie within the session (ErrOutsideSession otherwise). The cost is
// O(log n) in the number of changes the history holds.
func (h *History) SessionPrice(s Session, t time.Time) (Price, error) {
	start, end, err := h.checkSession(s)
	if err != nil {
		return 0, fmt.Errorf("pricing: session price at %v: %w", t.Round(0), err)
	}
	ns, err := toNanos(t)
	if err != nil {
		return 0, fmt.Errorf("pricing: session price at %v: %w", t.Round(0), err)
	}
	if ns < start || ns > end {
		return 0, fmt.Errorf("pricing: session price at %v: %w", t.Round(0), outside(s))
	}
	return h.priceAt(s.Locked, start, ns), nil
}

// checkSession validates s against the history and returns its start and
// end (math.MaxInt64 while it runs) in Unix nanoseconds.
func (h *History) checkSession(s Session) (start, end int64, err error) {
	if start, end, err = s.span(); err != nil {
		return 0, 0, err
	}
	if h.pruned && start < h.prunedBefore {
		return 0, 0, fmt.Errorf("session started at %v: history for sessions before %v was pruned: %w",
			s.Start.Round(0), fromNanos(h.prunedBefore), ErrPruned)
	}
	if h.lastAtOrBefore(start) < 0 {
		return 0, 0, h.noPrice("session started at", s.Start)
	}
	return start, end, nil
}

// span validates s on its own (no negative locked price, a start within
// the supported range, an end, when there is one, not before the start)
// and returns its start and end (math.MaxInt64 while it runs) in Unix
// nanoseconds.
func (s Session) span() (start, end int64, err error) {
	if s.Locked < 0 {
		return 0, 0, fmt.Errorf("session started at %v: negative locked price %d: %w", s.Start.Round(0), s.Locked, ErrInvalid)
	}
	start, err = toNanos(s.Start)
	if err != nil {
		return 0, 0, fmt.Errorf("session start: %w", err)
	}
	end = math.MaxInt64
	if !s.End.IsZero() {
		if end, err = toNanos(s.End); err != nil {
			return 0, 0, fmt.Errorf("session end: %w", err)
		}
		if end < start {
			return 0, 0, fmt.Errorf("session ends at %v before it starts at %v: %w", s.End.Round(0), s.Start.Round(0), ErrInvalid)
		}
	}
	return start, end, nil
}

func outside(s Session) error {
	if s.End.IsZero() {
		return fmt.Errorf("session runs from %v: %w", s.Start.Round(0), ErrOutsideSession)
	}
	return fmt.Errorf("session ran from %v to %v: %w", s.Start.Round(0), s.End.Round(0), ErrOutsideSession)
}

// priceAt computes the session price at t for a session that started at
// start (the node had a price then) with the given locked price; all times
// in Unix nanoseconds, t ≥ start.
//
// Let P be the asked price (a step function, right-continuous), w the
// window and M(u) the highest P over [u−w, u]. The session price is
// min(locked, min of M(u) for u in [start, t]). M is a step function that
// changes only at change instants at[i] and at their window ends at[i]+w.
// At a change instant alone M cannot fall (the window only gains a price),
// so the minimum over [start, t] is M(start) or M at a window end
// at[i]+w in (start, t]; and M(at[i]+w) is the highest price asked during
// [at[i], at[i]+w]. Those values are kept in h.reach (closed windows) or
// are the highest price from change i to the last one (open windows, which
// only fall as i grows, so the lowest over a range of them is the last's).
func (h *History) priceAt(locked Price, start, t int64) Price {
	w, n := h.win(), len(h.at)
	p := int64(locked)
	// M(start); before the first change the node asked nothing, so the
	// window is clipped to the history.
	p = min(p, h.high.query(max(h.lastAtOrBefore(start-w), 0), h.lastAtOrBefore(start)))
	// Window ends at[i]+w in (start, t].
	lo, hi := h.firstAfter(start-w), h.lastAtOrBefore(t-w)
	if lo <= hi {
		closed := h.reach.n
		if lo < closed {
			p = min(p, h.reach.query(lo, min(hi, closed-1)))
		}
		if hi >= closed {
			p = min(p, h.high.query(hi, n-1))
		}
	}
	return Price(p)
}
