package overload

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// stateVersion is the version of a tracker's marshalled state, "v".
const stateVersion = 1

// trackerState is a Tracker's state as JSON, as UnmarshalJSON reads it.
// MarshalJSON writes the same fields by hand (see appendState).
type trackerState struct {
	Version    int                 `json:"v"`
	Node       string              `json:"node,omitempty"`
	Last       time.Time           `json:"last_reading,omitzero"`
	Run        string              `json:"last_run,omitempty"`
	Seq        uint64              `json:"last_seq,omitempty"`
	Earlier    []runJSON           `json:"earlier_runs,omitempty"`
	Checks     map[Check]checkJSON `json:"checks,omitempty"`
	Overloaded bool                `json:"overloaded"`
	Since      time.Time           `json:"since,omitzero"`
	LastNotice time.Time           `json:"last_notice,omitzero"`
	Events     []eventJSON         `json:"events,omitempty"`
}

// runJSON is an earlier run and the latest seq observed of it.
type runJSON struct {
	Run string `json:"run"`
	Seq uint64 `json:"seq"`
}

// eventJSON is an Event as JSON: Lasted as a Go duration string. Events
// written before durations were strings carry "lasted_ns", nanoseconds;
// they are read, never written.
type eventJSON struct {
	Kind     EventKind `json:"kind"`
	At       time.Time `json:"at"`
	Findings []Finding `json:"findings,omitempty"`
	Lasted   string    `json:"lasted,omitempty"`
	LastedNS int64     `json:"lasted_ns,omitempty"`
}

func (j eventJSON) event() (Event, error) {
	e := Event{Kind: j.Kind, At: j.At, Findings: j.Findings, Lasted: time.Duration(j.LastedNS)}
	if j.Lasted != "" {
		d, err := time.ParseDuration(j.Lasted)
		if err != nil {
			return Event{}, fmt.Errorf("lasted: %w", err)
		}
		e.Lasted = d
	}
	return e, nil
}

// MarshalJSON encodes e with Lasted as a Go duration string, e.g.
// {"kind":"end","at":"2026-11-30T12:03:30Z","lasted":"3m30s"}; Lasted is
// left out when zero (every start).
func (e Event) MarshalJSON() ([]byte, error) {
	b, err := appendEvent(make([]byte, 0, eventSize(&e)), &e)
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	return b, nil
}

// UnmarshalJSON decodes MarshalJSON's encoding, and also an event written
// before durations were strings, whose "lasted_ns" is in nanoseconds.
func (e *Event) UnmarshalJSON(b []byte) error {
	var j eventJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	ev, err := j.event()
	if err != nil {
		return fmt.Errorf("decode event: %w", err)
	}
	*e = ev
	return nil
}

// checkJSON is one check's window as JSON: "window" lists the readings
// oldest first, "1" passed and "0" did not, e.g. "01101".
type checkJSON struct {
	Window string   `json:"window"`
	Last   *Finding `json:"last,omitempty"`
}

// MarshalJSON encodes the tracker's state: node, the time of the latest
// reading (and, for a version 2 reading, its run and seq, and the latest
// seq of each of the few runs before it), each check's
// window and latest passing finding, whether the node is overloaded and
// since when, the time of the latest notice, and the event list (each
// end's Lasted a duration string, as [Event.MarshalJSON] writes it).
// Limits are configuration, not state, and are left out.
func (t *Tracker) MarshalJSON() ([]byte, error) {
	b, err := t.appendState(make([]byte, 0, t.stateSize()))
	if err != nil {
		return nil, fmt.Errorf("encode tracker state of node %q: %w", t.node, err)
	}
	return b, nil
}

// UnmarshalJSON restores a tracker's state from MarshalJSON's encoding,
// replacing all of it but the limits (a zero Tracker's limits are the
// defaults). It checks that the state is consistent and returns an error,
// changing nothing, when it is not.
func (t *Tracker) UnmarshalJSON(b []byte) error {
	var s trackerState
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("restore tracker state: %w", err)
	}
	n, err := s.tracker()
	if err != nil {
		return fmt.Errorf("restore tracker state of node %q: %w", s.Node, err)
	}
	n.limits = t.limits
	*t = *n
	return nil
}

// RestoreTracker returns the tracker whose state MarshalJSON encoded as
// data, judging by l from now on.
func RestoreTracker(data []byte, l Limits) (*Tracker, error) {
	t := &Tracker{limits: l}
	if err := t.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return t, nil
}

// tracker checks s and builds the tracker it describes.
func (s *trackerState) tracker() (*Tracker, error) {
	if s.Version != stateVersion {
		return nil, fmt.Errorf("version %d, want %d", s.Version, stateVersion)
	}
	t := &Tracker{
		node:       s.Node,
		last:       s.Last,
		run:        s.Run,
		seq:        s.Seq,
		since:      s.Since, // Overloaded is checked against it below
		lastNotice: s.LastNotice,
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	after := func(name string, at time.Time) {
		if at.After(s.Last) {
			bad("%s %v is after the latest reading %v", name, at, s.Last)
		}
	}
	switch {
	case s.Run != "" && !validRun(s.Run):
		bad("last run %.80q is not a run id", s.Run)
	case (s.Run == "") != (s.Seq == 0):
		bad("last run %q and last seq %d: want both or neither", s.Run, s.Seq)
	case s.Run != "" && s.Last.IsZero():
		bad("last run %q without a latest reading", s.Run)
	}
	if len(s.Earlier) > maxEarlierRuns {
		bad("%d earlier runs, more than %d", len(s.Earlier), maxEarlierRuns)
	}
	for i, m := range s.Earlier {
		switch {
		case !validRun(m.Run):
			bad("earlier run %d: %.80q is not a run id", i, m.Run)
		case m.Seq == 0:
			bad("earlier run %d (%s): seq 0", i, m.Run)
		case m.Run == s.Run || slices.ContainsFunc(s.Earlier[:i], func(e runJSON) bool { return e.Run == m.Run }):
			bad("earlier run %d (%s) is listed twice", i, m.Run)
		default:
			t.earlier = append(t.earlier, runMark{m.Run, m.Seq})
		}
	}
	switch {
	case s.Overloaded && s.Since.IsZero():
		bad("overloaded without a start time")
	case !s.Overloaded && !s.Since.IsZero():
		bad("not overloaded but with a start time")
	}
	after("overload start", s.Since)
	after("last notice", s.LastNotice)
	for c, cj := range s.Checks {
		i := c.index()
		if i < 0 {
			bad("unknown check %q", c)
			continue
		}
		if len(cj.Window) > maxWindow {
			bad("check %q: window of %d readings, more than %d", c, len(cj.Window), maxWindow)
			continue
		}
		st := &t.checks[i]
		st.window = make([]bool, len(cj.Window))
		passed := false
		for j, ch := range []byte(cj.Window) {
			switch ch {
			case '0':
			case '1':
				st.window[j], passed = true, true
			default:
				bad("check %q: window %q has %q, want only 0 and 1", c, cj.Window, ch)
			}
		}
		if cj.Last != nil {
			if cj.Last.Check != c {
				bad("check %q: latest finding is of check %q", c, cj.Last.Check)
			}
			after(fmt.Sprintf("check %q: latest finding", c), cj.Last.At)
			f := *cj.Last
			st.last = &f
		} else if passed {
			bad("check %q: passed in its window but has no latest finding", c)
		}
	}
	events := make([]Event, len(s.Events))
	for i, j := range s.Events {
		e, err := j.event()
		if err != nil {
			bad("event %d: %v", i, err)
			continue
		}
		events[i] = e
		switch {
		case e.Kind != Start && e.Kind != End:
			bad("event %d: unknown kind %q", i, e.Kind)
		case e.At.IsZero():
			bad("event %d: no time", i)
		case e.Lasted < 0:
			bad("event %d: lasted %v", i, e.Lasted)
		case i > 0 && e.At.Before(s.Events[i-1].At):
			bad("event %d at %v is before the event before it", i, e.At)
		}
		after(fmt.Sprintf("event %d", i), e.At)
		for _, f := range e.Findings {
			if f.Check.index() < 0 {
				bad("event %d: unknown check %q", i, f.Check)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(events) > 0 {
		t.events = events
	}
	return t, nil
}
