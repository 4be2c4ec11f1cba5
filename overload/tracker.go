package overload

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Errors a caller may branch on. They come wrapped, with context.
var (
	// ErrDuplicate: a reading already counted. For version 2, a reading
	// whose seq is not above the latest of its run: a retry, which the
	// receiver acknowledges. For version 1, a reading at the same instant
	// as the previous one. It is not counted again.
	ErrDuplicate = errors.New("duplicate reading")
	// ErrOutOfOrder: a version 1 reading older than the previous one. It
	// is not counted.
	ErrOutOfOrder = errors.New("reading out of order")
	// ErrInvalidReading: a reading whose figures cannot be true (NaN,
	// negative, beyond any machine, memory above 100 %, a time before
	// 2000), or in an unknown wire version. The error names the field.
	ErrInvalidReading = errors.New("invalid reading")
)

// EventKind says whether an overload started or ended.
type EventKind string

// The event kinds.
const (
	Start EventKind = "start"
	End   EventKind = "end"
)

// Event is a start or an end of an overload of one node. Every start and
// end goes into the node's event list.
type Event struct {
	// Kind is Start or End.
	Kind EventKind `json:"kind"`
	// At is the time of the reading that started or ended the overload.
	At time.Time `json:"at"`
	// Findings, for a start, are the checks that held, with figures.
	Findings []Finding `json:"findings,omitempty"`
	// Lasted, for an end, is how long the overload lasted: from the
	// reading that started it to the reading that ended it. In JSON it is
	// a Go duration string, "lasted": "3m30s" (see [Event.MarshalJSON]).
	Lasted time.Duration
}

// Notice tells the node's operator that an overload started, and why, in
// figures. A tracker produces at most one per NoticeEvery (an hour).
type Notice struct {
	// Node names the node that is overloaded (the tracker's node).
	Node string `json:"node,omitempty"`
	// At is the time of the reading that started the overload.
	At time.Time `json:"at"`
	// Findings are the checks that held, in notice order.
	Findings []Finding `json:"findings"`
	// Text is the notice in words, e.g. "eu-01 is overloaded: memory at
	// 92 %; the connection table was full: 37 connections dropped".
	Text string `json:"text"`
}

// String returns n.Text.
func (n Notice) String() string { return n.Text }

// noticeText words a notice: the node and every finding, in order.
func noticeText(node string, fs []Finding) string {
	if node == "" {
		node = "the node"
	}
	return node + " is overloaded: " + strings.Join(Texts(fs), "; ")
}

// Result is what one reading did to a node's state.
type Result struct {
	// At is the time the reading was counted at: its own At, or, for a
	// version 2 reading dated at or before the previous reading, one
	// second after that one (see ReadingVersion). Event and Notice carry
	// this time.
	At time.Time
	// Overloaded says whether the node is overloaded after this reading.
	Overloaded bool
	// Findings are the checks that hold after this reading (passed in at
	// least Need of their last Window readings), in notice order, each
	// with the figures of the latest reading in which it passed.
	Findings []Finding
	// Passed are the checks that passed in this reading alone, in notice
	// order, each with this reading's figures: what Evaluate returns for
	// it, dated At. A check may pass without holding yet (fewer than Need
	// passes in its window) and hold without passing in this reading. Nil
	// when no check passed; the slice is the caller's.
	Passed []Finding
	// Event is the start or end this reading caused, or nil.
	Event *Event
	// Notice is the notice this reading caused, or nil: a start produces
	// one unless the node's previous notice went out less than
	// NoticeEvery before.
	Notice *Notice
}

// Tracker follows one node's readings and decides when it is overloaded.
//
// Each check keeps its own window of the node's last Window readings
// (readings received, in order, whatever the time between them). A check
// holds when it passed in at least Need of them; the node is overloaded
// while any check holds, and stays overloaded until none does.
//
// A Tracker's state marshals to JSON (see [Tracker.MarshalJSON]) so it
// survives restarts; [RestoreTracker] reads it back. The zero Tracker is
// usable: no node name and the default limits.
//
// A Tracker is not safe for concurrent use: callers that share one hold a
// lock around its methods.
type Tracker struct {
	node   string
	limits Limits

	last       time.Time // the latest reading's time (as counted); zero before any
	run        string    // the latest version 2 reading's run; empty when none, or a version 1 reading came after it
	seq        uint64    // the latest version 2 reading's seq in run
	earlier    []runMark // the runs before run, newest last, at most maxEarlierRuns
	checks     [numChecks]checkState
	since      time.Time // the current overload's start; zero when not overloaded
	lastNotice time.Time
	events     []Event
}

// maxEarlierRuns is how many runs before the latest a tracker remembers,
// so that a late retry from one of them is known for a retry.
const maxEarlierRuns = 4

// runMark is an earlier run and the latest seq observed of it.
type runMark struct {
	run string
	seq uint64
}

// checkState is one check's window, and its latest passing finding (the
// figures a notice names while the check holds).
type checkState struct {
	window []bool // oldest first, at most Window long
	last   *Finding
}

// holds reports whether the check passed in at least need of the latest
// window readings of its window (shorter than the window it was kept with
// when the limits changed since).
func (c *checkState) holds(need, window int) bool {
	n := 0
	for _, p := range c.window[max(0, len(c.window)-window):] {
		if p {
			n++
		}
	}
	return n >= need
}

// NewTracker returns a tracker for the node named node, judging by l
// (zero fields are defaults). It does not validate l: Observe returns
// l.Validate's error for every reading while l is invalid.
func NewTracker(node string, l Limits) *Tracker {
	return &Tracker{node: node, limits: l}
}

// Node returns the name of the tracker's node.
func (t *Tracker) Node() string { return t.node }

// Limits returns the limits the tracker judges by, as given (zero fields
// mean their defaults).
func (t *Tracker) Limits() Limits { return t.limits }

// SetLimits changes the limits the tracker judges by from the next
// reading on. Windows keep their readings; a smaller Window drops the
// oldest at the next reading.
func (t *Tracker) SetLimits(l Limits) { t.limits = l }

// Overloaded reports whether the node is overloaded.
func (t *Tracker) Overloaded() bool { return !t.since.IsZero() }

// Since returns when the current overload started, or the zero time when
// the node is not overloaded.
func (t *Tracker) Since() time.Time { return t.since }

// LastNotice returns when the node's latest notice went out, or the zero
// time when none has.
func (t *Tracker) LastNotice() time.Time { return t.lastNotice }

// LastEnd returns when the node's latest overload ended (the At of the
// newest End event), or the zero time when none has. Unlike a search of
// Events, it copies nothing.
func (t *Tracker) LastEnd() time.Time {
	for i := len(t.events) - 1; i >= 0; i-- {
		if t.events[i].Kind == End {
			return t.events[i].At
		}
	}
	return time.Time{}
}

// LastReading returns the time of the latest reading observed, or the
// zero time when none has been.
func (t *Tracker) LastReading() time.Time { return t.last }

// RecordNotice records that a notice for the node went out at at, so that
// the tracker sends none before at plus NoticeEvery. It is for a tracker
// that starts afresh but must not forget an earlier notice: one whose
// saved state had to be set aside, say because its readings were ahead
// of a clock since corrected.
//
// A time not after LastNotice changes nothing: the hold is never
// shortened. As with a notice Observe sends, the notice goes with a
// reading at at: when at is after LastReading, LastReading becomes at, so
// a version 1 reading not newer than at is refused as out of order (a
// version 2 reading is counted after it), and the state still marshals to
// one RestoreTracker accepts. Windows, overload and events are left as
// they are.
func (t *Tracker) RecordNotice(at time.Time) {
	if !at.After(t.lastNotice) {
		return
	}
	t.lastNotice = at
	if at.After(t.last) {
		t.last = at
	}
}

// Events returns a copy of the node's event list, newest last, at most
// MaxEvents long.
func (t *Tracker) Events() []Event {
	out := make([]Event, len(t.events))
	for i, e := range t.events {
		e.Findings = slices.Clone(e.Findings)
		out[i] = e
	}
	return out
}

// Findings returns the checks that hold now, in notice order, each with
// the figures of the latest reading in which it passed.
func (t *Tracker) Findings() []Finding {
	l := t.limits.withDefaults()
	return t.holding(l.Need, l.Window)
}

// holding returns the latest passing finding of every check that holds.
func (t *Tracker) holding(need, window int) []Finding {
	var out []Finding
	for i := range t.checks {
		c := &t.checks[i]
		if c.last != nil && c.holds(need, window) {
			out = append(out, *c.last)
		}
	}
	return out
}

// Observe takes the node's next reading and returns what it did: whether
// the node is overloaded now, which checks hold, which passed in this
// reading, and the event and notice it caused, if any.
//
// A version 2 reading (one with a run; see [ReadingVersion]) is ordered
// by its seq within its run: one whose seq is not above the latest
// observed of the same run returns an error wrapping [ErrDuplicate] (a
// retry: it was counted already), and so does one of the four runs
// before the latest. Any other is counted, a seq gap or a
// new run included, whatever its time; when it is dated at or before the
// previous reading, it is counted one second after that one (Result.At),
// so events and the notice hour never run backwards.
//
// A version 1 reading must be newer than the previous one: one at the
// same instant returns an error wrapping [ErrDuplicate], an older one an
// error wrapping [ErrOutOfOrder].
//
// An invalid reading (see [Reading.Validate]) returns an error wrapping
// [ErrInvalidReading]; a reading of another node (its Node set and not
// the tracker's) is an error too. A reading that returns an error changes
// nothing. Observe has no clock: a receiver that has one checks a reading
// with [Reading.ValidateAt] first, so that one dated next year does not
// hold the node's later readings behind it.
func (t *Tracker) Observe(r Reading) (Result, error) {
	if err := t.limits.Validate(); err != nil {
		return Result{}, fmt.Errorf("observe reading of node %q: %w", t.node, err)
	}
	l := t.limits.withDefaults()
	if err := r.Validate(); err != nil {
		if r.Node != "" { // the error names it
			return Result{}, fmt.Errorf("observe reading at %s: %w", stamp(r.At), oneLine{err})
		}
		return Result{}, fmt.Errorf("observe reading of node %q at %s: %w", t.node, stamp(r.At), oneLine{err})
	}
	if r.Node != "" && t.node != "" && r.Node != t.node {
		return Result{}, fmt.Errorf("observe reading at %s: reading is of node %q, tracker is for node %q", stamp(r.At), r.Node, t.node)
	}
	at, err := t.order(r)
	if err != nil {
		return Result{}, err
	}

	fs := Evaluate(r, l)
	for i := range fs {
		fs[i].At = at
	}
	var passed [numChecks]*Finding
	for _, f := range fs { // f is a copy: fs goes to the caller as Passed
		passed[f.Check.index()] = &f
	}
	for i := range t.checks {
		c := &t.checks[i]
		if passed[i] != nil {
			c.last = passed[i]
		}
		c.window = append(c.window, passed[i] != nil)
		if n := len(c.window) - l.Window; n > 0 {
			c.window = slices.Delete(c.window, 0, n)
		}
	}
	if r.Run != t.run {
		t.earlier = rememberRun(t.earlier, t.run, t.seq, r.Run)
	}
	t.last, t.run, t.seq = at, r.Run, r.Seq

	res := Result{At: at, Findings: t.holding(l.Need, l.Window), Passed: fs}
	switch {
	case !t.Overloaded() && len(res.Findings) > 0:
		t.since = at // never zero: Validate refuses a reading without a time
		e := Event{Kind: Start, At: at, Findings: slices.Clone(res.Findings)}
		t.addEvent(e, l.MaxEvents)
		res.Event = &e
		if t.lastNotice.IsZero() || at.Sub(t.lastNotice) >= l.NoticeEvery {
			t.lastNotice = at
			res.Notice = &Notice{
				Node:     t.node,
				At:       at,
				Findings: slices.Clone(res.Findings),
				Text:     noticeText(t.node, res.Findings),
			}
		}
	case t.Overloaded() && len(res.Findings) == 0:
		e := Event{Kind: End, At: at, Lasted: at.Sub(t.since)}
		t.since = time.Time{}
		t.addEvent(e, l.MaxEvents)
		res.Event = &e
	}
	res.Overloaded = t.Overloaded()
	return res, nil
}

// order decides where r goes in the node's readings: it returns the
// time r is counted at, or the error that refuses it (a duplicate, or a
// version 1 reading out of order).
func (t *Tracker) order(r Reading) (time.Time, error) {
	if r.Run == "" { // version 1: ordered by time
		switch {
		case t.last.IsZero():
		case r.At.Equal(t.last):
			return time.Time{}, fmt.Errorf("observe reading of node %q at %s: %w: the previous reading has the same time", t.node, stamp(r.At), ErrDuplicate)
		case r.At.Before(t.last):
			return time.Time{}, fmt.Errorf("observe reading of node %q at %s: %w: the previous reading is at %s", t.node, stamp(r.At), ErrOutOfOrder, stamp(t.last))
		}
		return r.At, nil
	}
	// A retry repeats a reading whole, so it is never dated after the
	// last counted reading (counted times only move forward). A seq not
	// above the run's last that is dated after it is no retry: the node
	// was rolled back (a VM snapshot, a state directory restored from a
	// backup) and goes on from an older seq. It is counted, and the run
	// goes on from that seq, so a rollback never blinds the window.
	if r.Run == t.run && r.Seq <= t.seq && !r.At.After(t.last) {
		return time.Time{}, fmt.Errorf("observe reading of node %q at %s: %w: seq %d of run %s, the latest observed is %d",
			t.node, stamp(r.At), ErrDuplicate, r.Seq, r.Run, t.seq)
	}
	// The same holds of the few runs before the latest: a retry of one
	// that arrives after a new run began (its answer lost, then sent
	// again through another replica) was counted already.
	for _, m := range t.earlier {
		if r.Run == m.run && r.Seq <= m.seq && !r.At.After(t.last) {
			return time.Time{}, fmt.Errorf("observe reading of node %q at %s: %w: seq %d of the earlier run %s, whose latest observed is %d",
				t.node, stamp(r.At), ErrDuplicate, r.Seq, r.Run, m.seq)
		}
	}
	if !t.last.IsZero() && !r.At.After(t.last) {
		return t.last.Add(time.Second), nil
	}
	return r.At, nil
}

// stamp is t in an error: RFC 3339 with the nanoseconds it has, without
// the monotonic clock reading that %v would print ("m=+0.000026882").
func stamp(t time.Time) string { return t.Format(time.RFC3339Nano) }

// oneLine is err on one line: the lines of a joined error (Validate's,
// one a problem) are separated by "; ". It unwraps to err.
type oneLine struct{ err error }

func (e oneLine) Error() string { return strings.ReplaceAll(e.err.Error(), "\n", "; ") }
func (e oneLine) Unwrap() error { return e.err }

// rememberRun returns earlier with the run being left (run, at seq)
// added as the newest, and next, the run taking over, taken out: a run
// is either the latest or an earlier one. It keeps at most
// maxEarlierRuns, dropping the oldest.
func rememberRun(earlier []runMark, run string, seq uint64, next string) []runMark {
	earlier = slices.DeleteFunc(earlier, func(m runMark) bool { return m.run == next || m.run == run })
	if run != "" {
		earlier = append(earlier, runMark{run, seq})
	}
	if n := len(earlier) - maxEarlierRuns; n > 0 {
		earlier = slices.Delete(earlier, 0, n)
	}
	return earlier
}

// addEvent appends e to the event list, dropping the oldest beyond max.
// The list keeps its own copy of e's findings.
func (t *Tracker) addEvent(e Event, max int) {
	e.Findings = slices.Clone(e.Findings)
	t.events = append(t.events, e)
	if n := len(t.events) - max; n > 0 {
		t.events = slices.Delete(t.events, 0, n)
	}
}
