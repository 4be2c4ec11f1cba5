package overload

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

const step = 30 * time.Second

// hot returns a reading at at in which memory passes (92 %).
func hot(at time.Time) Reading {
	r := calm(at)
	r.MemoryUsedPercent = 92
	return r
}

// observe feeds r to tr and fails the test on an error.
func observe(t *testing.T, tr *Tracker, r Reading) Result {
	t.Helper()
	res, err := tr.Observe(r)
	if err != nil {
		t.Fatalf("Observe(reading at %v): %v", r.At.Format(time.TimeOnly), err)
	}
	return res
}

// TestWindow feeds patterns of passing (x) and calm (.) readings and
// checks, after each, whether the node is overloaded (O or -) and which
// event it produced (S start, E end, space none).
func TestWindow(t *testing.T) {
	tests := []struct {
		name, readings, overloaded, events string
	}{
		{"start on the 3rd passing of 5", "xx.x..", "---OO-", "   S E"},
		{"two of five never start", "xx...xx...xx", "------------", "            "},
		{"three in a row", "xxx", "--O", "  S"},
		{"start at the end of a window", "x.x.x", "----O", "    S"},
		{"two of five at the window's edges", "x...x", "-----", "     "},
		{"not started when the 1st passing slid out", "x..x.x", "------", "      "},
		{"end when no check holds in 3 of 5", "xxx..x...", "--OOOO---", "  S   E  "},
		{"stays while 3 of 5 hold", "xxxx.xx.xx", "--OOOOOOOO", "  S       "},
		{"ends and starts as the window slides", "xxxx.x.x.x", "--OOOOOO-O", "  S     ES"},
		{"end then start again", "xxx...xxx", "--OOO---O", "  S  E  S"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			over, ev, _ := trace(t, NewTracker("eu-01", Limits{}), tt.readings, func(c rune, at time.Time) Reading {
				if c == 'x' {
					return hot(at)
				}
				return calm(at)
			})
			if over != tt.overloaded || ev != tt.events {
				t.Errorf("readings   %q\noverloaded %q, want %q\nevents     %q, want %q",
					tt.readings, over, tt.overloaded, ev, tt.events)
			}
		})
	}
}

// trace observes one reading per character of readings, made by reading
// from the character, a step apart from t0 + step on. It returns, after
// each reading, whether the node is overloaded (O or -) and the event it
// produced (S start, E end, space none), and how many notices went out.
func trace(t *testing.T, tr *Tracker, readings string, reading func(c rune, at time.Time) Reading) (overloaded, events string, notices int) {
	t.Helper()
	at := t0
	var over, ev strings.Builder
	for _, c := range readings {
		at = at.Add(step)
		res := observe(t, tr, reading(c, at))
		if res.Overloaded != tr.Overloaded() {
			t.Fatalf("result says overloaded=%v, tracker %v", res.Overloaded, tr.Overloaded())
		}
		if res.Overloaded {
			over.WriteByte('O')
		} else {
			over.WriteByte('-')
		}
		switch {
		case res.Event == nil:
			ev.WriteByte(' ')
		case res.Event.Kind == Start:
			ev.WriteByte('S')
		case res.Event.Kind == End:
			ev.WriteByte('E')
		}
		if res.Notice != nil {
			notices++
		}
	}
	return over.String(), ev.String(), notices
}

// TestChecksKeepOwnWindows: two checks that each pass in 2 of 5 readings,
// never the same reading, do not make an overload: each check counts its
// own window.
func TestChecksKeepOwnWindows(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	at := t0
	for i := range 10 {
		at = at.Add(step)
		r := calm(at)
		switch i % 5 {
		case 0, 2:
			r.MemoryUsedPercent = 95
		case 1, 3:
			r.ListenDrops = 20
		}
		if res := observe(t, tr, r); res.Overloaded {
			t.Fatalf("reading %d: overloaded by %v, but no check passed in 3 of 5", i, res.Findings)
		}
	}
}

// TestTwoChecksOneNotice: two checks holding at once give one start and
// one notice naming both, with figures from the latest reading in which
// each passed.
func TestTwoChecksOneNotice(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	var notices []*Notice
	for i := range 3 {
		r := hot(t0.Add(time.Duration(i) * step))
		r.ConntrackDrops = uint64(30 + i*7) // 30, 37, 44
		if i == 1 {
			r.MemoryUsedPercent = 91.2
		}
		if i == 2 {
			r.MemoryUsedPercent = 85 // memory passed in 2 of 3: it does not hold
		}
		if res := observe(t, tr, r); res.Notice != nil {
			notices = append(notices, res.Notice)
		}
	}
	// memory passed in readings 0 and 1 only: it does not hold yet.
	if len(notices) != 1 {
		t.Fatalf("got %d notices, want 1", len(notices))
	}
	n := notices[0]
	if want := "eu-01 is overloaded: the connection table was full: 44 connections dropped"; n.Text != want {
		t.Fatalf("notice %q\n want %q", n.Text, want)
	}

	// Both hold: memory passes in 3 of 5 in reading 3, while the
	// overload is on. No new notice, but Findings names both.
	r := hot(t0.Add(3 * step))
	r.MemoryUsedPercent = 93.6
	res := observe(t, tr, r)
	if res.Notice != nil || res.Event != nil {
		t.Fatalf("a check joining a running overload gave event %v, notice %v", res.Event, res.Notice)
	}
	if len(res.Findings) != 2 || res.Findings[0].Text != "memory at 94 %" ||
		res.Findings[1].Text != "the connection table was full: 44 connections dropped" {
		t.Fatalf("findings %+v, want memory at 94 %% (this reading) and 44 dropped (the latest reading that passed)", res.Findings)
	}
	if !res.Findings[1].At.Equal(t0.Add(2 * step)) {
		t.Errorf("conntrack drops figure from %v, want the reading at %v", res.Findings[1].At, t0.Add(2*step))
	}

	// Both start at once on a fresh tracker: one notice, both named.
	tr = NewTracker("eu-02", Limits{})
	var got []*Notice
	for i := range 3 {
		r := hot(t0.Add(time.Duration(i) * step))
		r.Node = "eu-02"
		r.ConntrackDrops = 37
		if res := observe(t, tr, r); res.Notice != nil {
			got = append(got, res.Notice)
		}
	}
	want := "eu-02 is overloaded: memory at 92 %; the connection table was full: 37 connections dropped"
	if len(got) != 1 || got[0].Text != want || got[0].String() != want {
		t.Fatalf("notices %v, want one: %q", got, want)
	}
	if len(got[0].Findings) != 2 || got[0].Findings[0].Check != CheckMemory || got[0].Findings[1].Check != CheckConntrackDrops {
		t.Errorf("notice findings %+v, want memory then conntrack drops", got[0].Findings)
	}
}

// TestResultPassed: Result.Passed names the checks that passed in this
// reading alone, with its figures, whether or not they hold; Findings
// names those that hold. The caller owns Passed.
func TestResultPassed(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	checksOf := func(fs []Finding) []Check {
		var out []Check
		for _, f := range fs {
			out = append(out, f.Check)
		}
		return out
	}
	tests := []struct {
		name           string
		mem            float64
		drops          uint64
		passed, holds  []Check
		passedFirstFig string
	}{
		// Memory passes on its own: not yet 3 of 5, so it does not hold.
		{"passes, does not hold", 95, 0, []Check{CheckMemory}, nil, "memory at 95 %"},
		{"passes twice", 96, 0, []Check{CheckMemory}, nil, "memory at 96 %"},
		// Two checks pass at once, in notice order; memory now holds.
		{"two pass, one holds", 97, 37, []Check{CheckMemory, CheckConntrackDrops}, []Check{CheckMemory}, "memory at 97 %"},
		// Nothing passes: Passed is nil while memory still holds.
		{"holds, does not pass", 40, 0, nil, []Check{CheckMemory}, ""},
	}
	at := t0
	for _, tt := range tests {
		at = at.Add(step)
		r := calm(at)
		r.MemoryUsedPercent, r.ConntrackDrops = tt.mem, tt.drops
		res := observe(t, tr, r)
		if got := checksOf(res.Passed); !reflect.DeepEqual(got, tt.passed) {
			t.Errorf("%s: Passed %v, want %v", tt.name, got, tt.passed)
		}
		if got := checksOf(res.Findings); !reflect.DeepEqual(got, tt.holds) {
			t.Errorf("%s: Findings %v, want %v", tt.name, got, tt.holds)
		}
		if tt.passedFirstFig != "" && (len(res.Passed) == 0 || res.Passed[0].Text != tt.passedFirstFig || !res.Passed[0].At.Equal(at)) {
			t.Errorf("%s: Passed %+v, want first %q at %v", tt.name, res.Passed, tt.passedFirstFig, at)
		}
		if want := Evaluate(r, Limits{}); !reflect.DeepEqual(res.Passed, want) {
			t.Errorf("%s: Passed %+v, Evaluate gives %+v", tt.name, res.Passed, want)
		}
		// The tracker keeps its own copy: what the caller does to Passed
		// does not reach the figures it names later.
		for i := range res.Passed {
			res.Passed[i].Text = "scribbled"
		}
		for _, f := range tr.Findings() {
			if f.Text == "scribbled" {
				t.Fatalf("%s: changing Result.Passed changed the tracker's finding %+v", tt.name, f)
			}
		}
	}
}

// feed observes pattern (x hot, . calm) from start, one reading a step,
// and returns the notices and events it produced and the time of the
// next reading.
func feed(t *testing.T, tr *Tracker, start time.Time, pattern string) (notices []Notice, events []Event, next time.Time) {
	t.Helper()
	at := start
	for _, c := range pattern {
		r := calm(at)
		if c == 'x' {
			r = hot(at)
		}
		res := observe(t, tr, r)
		if res.Notice != nil {
			notices = append(notices, *res.Notice)
		}
		if res.Event != nil {
			events = append(events, *res.Event)
		}
		at = at.Add(step)
	}
	return notices, events, at
}

// TestNoticeEveryHour: a second start within the hour is an event and no
// notice; a start an hour or more after the previous notice has one.
func TestNoticeEveryHour(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	n, e, next := feed(t, tr, t0, "xxx...")
	if len(n) != 1 || len(e) != 2 || e[0].Kind != Start || e[1].Kind != End {
		t.Fatalf("first overload: %d notices, events %+v; want 1 notice, start and end", len(n), e)
	}
	first := n[0].At
	if !tr.LastNotice().Equal(first) {
		t.Errorf("LastNotice %v, want %v", tr.LastNotice(), first)
	}
	if e[1].Lasted != 3*step {
		t.Errorf("end lasted %v, want %v", e[1].Lasted, 3*step)
	}

	n, e, _ = feed(t, tr, next, "xxx")
	if len(n) != 0 || len(e) != 1 || e[0].Kind != Start {
		t.Fatalf("second start within the hour: notices %v, events %+v; want a start and no notice", n, e)
	}
	if got := tr.Events(); len(got) != 3 {
		t.Fatalf("event list has %d events, want 3", len(got))
	}

	// End it, then start again at exactly an hour after the notice:
	// allowed ("less than an hour earlier" suppresses).
	_, _, _ = feed(t, tr, first.Add(20*time.Minute), "...")
	start := first.Add(time.Hour).Add(-2 * step) // the 3rd hot reading lands on first+1h
	n, _, _ = feed(t, tr, start, "xxx")
	if len(n) != 1 || !n[0].At.Equal(first.Add(time.Hour)) {
		t.Fatalf("start an hour after the last notice: notices %v, want one at %v", n, first.Add(time.Hour))
	}
}

// TestNoticeHourJustShort: a start one step short of the hour has no notice.
func TestNoticeHourJustShort(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	n, _, _ := feed(t, tr, t0, "xxx...")
	first := n[0].At
	n, e, _ := feed(t, tr, first.Add(time.Hour).Add(-3*step), "xxx")
	if len(n) != 0 || len(e) != 1 {
		t.Fatalf("start at %v after the notice: %d notices, %d events; want an event and no notice", e[0].At.Sub(first), len(n), len(e))
	}
}

// roundTrip marshals tr and restores it, as a restart does; it returns
// the restored tracker and the state it was restored from.
func roundTrip(t *testing.T, tr *Tracker) (*Tracker, []byte) {
	t.Helper()
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	back, err := RestoreTracker(b, Limits{})
	if err != nil {
		t.Fatalf("RestoreTracker(%s): %v", b, err)
	}
	return back, b
}

// TestRestartKeepsTheHour: a tracker restored from marshalled state keeps
// its windows, its overload and the time of its last notice.
func TestRestartKeepsTheHour(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	_, _, next := feed(t, tr, t0, "xxx...xx")
	if tr.Overloaded() {
		t.Fatal("overloaded before the restart; the test wants a half-filled window")
	}
	back, b := roundTrip(t, tr)
	if !reflect.DeepEqual(back, tr) {
		t.Fatalf("restored tracker differs:\n got %+v\nwant %+v", back, tr)
	}
	// The window survived: one more hot reading starts the overload, and
	// the hour since the first notice is not over: no notice.
	res := observe(t, back, hot(next))
	if res.Event == nil || res.Event.Kind != Start {
		t.Fatalf("restored tracker: no start on the 3rd passing reading, result %+v", res)
	}
	if res.Notice != nil {
		t.Fatalf("restored tracker sent a notice %v within the hour of the last one at %v", res.Notice, back.LastNotice())
	}
	// And the old readings' order is kept: a reading before the restart's
	// last is refused.
	if _, err := back.Observe(hot(t0)); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("old reading after restore: err %v, want ErrOutOfOrder", err)
	}

	// Unmarshal into a zero Tracker and into a tracker with limits.
	var zero Tracker
	if err := json.Unmarshal(b, &zero); err != nil {
		t.Fatal(err)
	}
	if zero.Node() != "eu-01" || zero.Limits() != (Limits{}) {
		t.Errorf("zero tracker restored as node %q limits %+v", zero.Node(), zero.Limits())
	}
	withLimits := NewTracker("ignored", Limits{MemoryPercent: 95})
	if err := json.Unmarshal(b, withLimits); err != nil {
		t.Fatal(err)
	}
	if withLimits.Node() != "eu-01" || withLimits.Limits().MemoryPercent != 95 {
		t.Errorf("restored into NewTracker: node %q limits %+v; want the state's node and the tracker's limits", withLimits.Node(), withLimits.Limits())
	}
}

// TestRecordNotice: a fresh tracker told of a notice at t0 sends none for
// an overload within the hour after it, and one for an overload that
// starts an hour after it; its state survives a restore; an earlier time
// does not shorten the hold.
func TestRecordNotice(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	tr.RecordNotice(time.Time{})
	if !tr.LastNotice().IsZero() || !tr.LastReading().IsZero() {
		t.Fatalf("RecordNotice(zero time): last notice %v, last reading %v; want both zero", tr.LastNotice(), tr.LastReading())
	}
	tr.RecordNotice(t0)
	tr.RecordNotice(t0.Add(-time.Hour)) // earlier: changes nothing
	if !tr.LastNotice().Equal(t0) || !tr.LastReading().Equal(t0) {
		t.Fatalf("after RecordNotice(t0): last notice %v, last reading %v; want both %v", tr.LastNotice(), tr.LastReading(), t0)
	}
	if _, err := tr.Observe(hot(t0)); !errors.Is(err, ErrDuplicate) {
		t.Errorf("reading at the notice's time: err %v, want ErrDuplicate", err)
	}
	if _, err := tr.Observe(hot(t0.Add(-step))); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("reading before the notice's time: err %v, want ErrOutOfOrder", err)
	}

	back, _ := roundTrip(t, tr)
	if !back.LastNotice().Equal(t0) {
		t.Errorf("restored last notice %v, want %v", back.LastNotice(), t0)
	}

	for _, tk := range []*Tracker{tr, back} {
		n, e, _ := feed(t, tk, t0.Add(step), "xxx...")
		if len(n) != 0 || len(e) != 2 || e[0].Kind != Start {
			t.Fatalf("overload within the hour of a recorded notice: notices %v, events %+v; want a start, an end and no notice", n, e)
		}
		start := t0.Add(time.Hour).Add(-2 * step) // the 3rd hot reading lands on t0+1h
		n, _, _ = feed(t, tk, start, "xxx")
		if len(n) != 1 || !n[0].At.Equal(t0.Add(time.Hour)) {
			t.Fatalf("overload an hour after a recorded notice: notices %v, want one at %v", n, t0.Add(time.Hour))
		}
	}

	// On a tracker with readings after at, the latest reading stays.
	tr = NewTracker("eu-01", Limits{})
	feed(t, tr, t0, "x.")
	tr.RecordNotice(t0)
	if !tr.LastNotice().Equal(t0) || !tr.LastReading().Equal(t0.Add(step)) {
		t.Errorf("RecordNotice before the latest reading: last notice %v, last reading %v; want %v, %v",
			tr.LastNotice(), tr.LastReading(), t0, t0.Add(step))
	}
}

// TestStateJSON checks the marshalled state's shape and that garbage is
// refused without changing the tracker.
func TestStateJSON(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	feed(t, tr, t0, "xxx.x")
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["v"] != 1.0 || m["node"] != "eu-01" || m["overloaded"] != true {
		t.Errorf("state %s lacks v, node or overloaded", b)
	}
	if w := m["checks"].(map[string]any)["memory"].(map[string]any)["window"]; w != "11101" {
		t.Errorf("memory window %v, want \"11101\"", w)
	}

	bad := []string{
		``, `null`, `[]`, `{}`, `{"v":2}`, `"x"`, `{"v":1,"checks":{"disk":{"window":"1"}}}`,
		`{"v":1,"checks":{"memory":{"window":"12"}}}`,
		`{"v":1,"checks":{"memory":{"window":"1"}}}`,
		`{"v":1,"overloaded":true}`,
		`{"v":1,"since":"2026-11-30T12:00:00Z","last_reading":"2026-11-30T12:00:00Z"}`,
		`{"v":1,"last_reading":"2026-11-30T12:00:00Z","last_notice":"2026-11-30T13:00:00Z"}`,
		`{"v":1,"last_reading":"2026-11-30T12:00:00Z","events":[{"kind":"begin","at":"2026-11-30T12:00:00Z"}]}`,
		`{"v":1,"last_reading":"2026-11-30T12:00:00Z","events":[{"kind":"end","at":"2026-11-30T12:00:00Z","lasted_ns":-1}]}`,
		`{"v":1,"last_reading":"2026-11-30T12:00:00Z","events":[{"kind":"end","at":"2026-11-30T11:00:00Z"},{"kind":"start","at":"2026-11-30T10:00:00Z"}]}`,
		`{"v":1,"checks":{"memory":{"window":"` + strings.Repeat("0", maxWindow+1) + `"}}}`,
	}
	for _, s := range bad {
		before, _ := json.Marshal(tr)
		if err := json.Unmarshal([]byte(s), tr); err == nil {
			t.Errorf("state %.80q restored, want an error", s)
		}
		after, _ := json.Marshal(tr)
		if string(before) != string(after) {
			t.Errorf("refused state %.80q changed the tracker", s)
		}
	}
}

// TestObserveRefuses: readings out of order, duplicate, invalid, or of
// another node return errors and are not counted.
func TestObserveRefuses(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	observe(t, tr, hot(t0))
	observe(t, tr, hot(t0.Add(step)))

	refused := []struct {
		name string
		r    Reading
		is   error
	}{
		{"duplicate", hot(t0.Add(step)), ErrDuplicate},
		{"out of order", hot(t0), ErrOutOfOrder},
		{"NaN memory", func() Reading { r := hot(t0.Add(2 * step)); r.MemoryUsedPercent = math.NaN(); return r }(), ErrInvalidReading},
		{"negative load", func() Reading { r := hot(t0.Add(2 * step)); r.Load15 = -1; return r }(), ErrInvalidReading},
		{"infinite rate", func() Reading { r := hot(t0.Add(2 * step)); r.Links[0].RxBitsPerSecond = math.Inf(1); return r }(), ErrInvalidReading},
		{"no time", func() Reading { r := hot(t0.Add(2 * step)); r.At = time.Time{}; return r }(), ErrInvalidReading},
		{"another node", func() Reading { r := hot(t0.Add(2 * step)); r.Node = "us-01"; return r }(), nil},
	}
	for _, tt := range refused {
		res, err := tr.Observe(tt.r)
		if err == nil {
			t.Errorf("%s: Observe accepted it: %+v", tt.name, res)
			continue
		}
		if tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("%s: err %v, want it to wrap %v", tt.name, err, tt.is)
		}
	}
	// Neither refused reading was counted: the third hot reading starts.
	if tr.Overloaded() {
		t.Fatal("overloaded after 2 counted readings")
	}
	res := observe(t, tr, hot(t0.Add(2*step)))
	if res.Event == nil || res.Event.Kind != Start {
		t.Fatalf("3rd hot reading after refused ones: %+v, want a start", res)
	}
	if !tr.LastReading().Equal(t0.Add(2 * step)) {
		t.Errorf("LastReading %v", tr.LastReading())
	}
}

// TestEventsBounded: the event list keeps the latest MaxEvents, newest last.
func TestEventsBounded(t *testing.T) {
	tr := NewTracker("eu-01", Limits{MaxEvents: 4, NoticeEvery: time.Nanosecond})
	n, e, _ := feed(t, tr, t0, strings.Repeat("xxx...", 5))
	if len(n) != 5 || len(e) != 10 {
		t.Fatalf("%d notices, %d events; want 5 and 10", len(n), len(e))
	}
	got := tr.Events()
	if len(got) != 4 {
		t.Fatalf("event list has %d, want 4", len(got))
	}
	if !reflect.DeepEqual(got, e[6:]) {
		t.Fatalf("event list\n %+v\nwant the newest\n %+v", got, e[6:])
	}
	got[0].Findings = nil // a copy: the tracker's list is untouched
	if tr.Events()[0].Findings == nil {
		t.Fatal("Events returned the tracker's own list")
	}
}

// TestLimitsValidate: invalid limits are refused by Validate and by Observe.
func TestLimitsValidate(t *testing.T) {
	if err := (Limits{}).Validate(); err != nil {
		t.Fatalf("zero limits: %v", err)
	}
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("default limits: %v", err)
	}
	if (Limits{}).withDefaults() != DefaultLimits() {
		t.Fatalf("zero limits mean %+v, want the defaults %+v", Limits{}.withDefaults(), DefaultLimits())
	}
	bad := []struct {
		l    Limits
		says string
	}{
		{Limits{MemoryPercent: 101}, "memory percent"},
		{Limits{MemoryPercent: -1}, "memory percent"},
		{Limits{ConntrackFillPercent: math.NaN()}, "conntrack fill percent"},
		{Limits{BandwidthPercent: 150}, "bandwidth percent"},
		{Limits{LoadPerCPU: math.Inf(1)}, "load per cpu"},
		{Limits{Window: -1}, "window"},
		{Limits{Window: maxWindow + 1}, "window"},
		{Limits{Need: 6}, "need is 6"},
		{Limits{Window: 3, Need: 4}, "need is 4"},
		{Limits{NoticeEvery: -time.Second}, "notice every"},
		{Limits{MaxEvents: -1}, "max events"},
	}
	for _, b := range bad {
		err := b.l.Validate()
		if err == nil || !strings.Contains(err.Error(), b.says) {
			t.Errorf("Validate(%+v) = %v, want an error about %s", b.l, err, b.says)
		}
		if _, err := NewTracker("x", b.l).Observe(hot(t0)); err == nil {
			t.Errorf("Observe with limits %+v accepted a reading", b.l)
		}
	}
	// A small window without Need takes Need as min(3, Window).
	if l := (Limits{Window: 2}).withDefaults(); l.Need != 2 {
		t.Errorf("window 2: need %d, want 2", l.Need)
	}
}

// TestSetLimitsShrinksWindow: a smaller window drops the oldest readings.
func TestSetLimitsShrinksWindow(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	feed(t, tr, t0, "xx...")
	if len(tr.Findings()) != 0 {
		t.Fatalf("xx... holds: %v", tr.Findings())
	}
	tr.SetLimits(Limits{Window: 5, Need: 2})
	if len(tr.Findings()) != 1 {
		t.Fatalf("xx... with need 2: holds %v, want memory", tr.Findings())
	}
	// Before the next reading trims it, the kept window is read as the
	// new, shorter one: the last 2 readings, neither passed.
	tr.SetLimits(Limits{Window: 2, Need: 1})
	if len(tr.Findings()) != 0 {
		t.Fatalf("window 2 (..) holds %v", tr.Findings())
	}
	tr = NewTracker("eu-01", Limits{})
	feed(t, tr, t0, "xx...")
	tr.SetLimits(Limits{Window: 3, Need: 2})
	res := observe(t, tr, hot(t0.Add(5*step)))
	if res.Overloaded {
		t.Fatalf("window 3 (..x) overloaded")
	}
	res = observe(t, tr, hot(t0.Add(6*step)))
	if !res.Overloaded {
		t.Fatalf("window 3 (.xx), need 2: not overloaded")
	}
}

// TestZeroTracker: the zero Tracker works with the defaults.
func TestZeroTracker(t *testing.T) {
	var tr Tracker
	n, _, _ := feed(t, &tr, t0, "xxx")
	if len(n) != 1 || !strings.HasPrefix(n[0].Text, "the node is overloaded: memory at 92 %") {
		t.Fatalf("zero tracker notices %v", n)
	}
}

// TestLastEnd: zero before any overload ended and during the first one;
// the newest End's time after, also while a later overload runs.
func TestLastEnd(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	if !tr.LastEnd().IsZero() {
		t.Fatalf("fresh tracker: LastEnd %v, want zero", tr.LastEnd())
	}
	_, _, next := feed(t, tr, t0, "xxx")
	if !tr.Overloaded() || !tr.LastEnd().IsZero() {
		t.Fatalf("first overload running: overloaded %v, LastEnd %v; want true, zero", tr.Overloaded(), tr.LastEnd())
	}
	_, _, next = feed(t, tr, next, "...")
	_, _, _ = feed(t, tr, next, "xxx")
	var want time.Time
	for _, e := range tr.Events() {
		if e.Kind == End {
			want = e.At
		}
	}
	if want.IsZero() || !tr.Overloaded() || !tr.LastEnd().Equal(want) {
		t.Errorf("second overload running: LastEnd %v, want the End event's %v", tr.LastEnd(), want)
	}
}

// TestDurationsJSON: durations in events and limits are Go duration
// strings; nanoseconds written before that still decode.
func TestDurationsJSON(t *testing.T) {
	e := Event{Kind: End, At: t0, Lasted: 210 * time.Second}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"kind":"end","at":"2026-11-30T12:00:00Z","lasted":"3m30s"}`; string(b) != want {
		t.Errorf("end event %s, want %s", b, want)
	}
	for _, s := range []string{string(b), `{"kind":"end","at":"2026-11-30T12:00:00Z","lasted_ns":210000000000}`} {
		var back Event
		if err := json.Unmarshal([]byte(s), &back); err != nil || !reflect.DeepEqual(back, e) {
			t.Errorf("decode %s: %+v, %v; want %+v", s, back, err, e)
		}
	}
	if err := json.Unmarshal([]byte(`{"kind":"end","lasted":"soon"}`), new(Event)); err == nil {
		t.Errorf("lasted \"soon\" decoded")
	}
	if b, _ := json.Marshal(Event{Kind: Start, At: t0}); strings.Contains(string(b), "lasted") {
		t.Errorf("start event %s has a lasted", b)
	}

	l := Limits{MemoryPercent: 95, NoticeEvery: 90 * time.Minute}
	b, err = json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"memory_percent":95,"notice_every":"1h30m0s"}`; string(b) != want {
		t.Errorf("limits %s, want %s", b, want)
	}
	for _, s := range []string{string(b), `{"memory_percent":95,"notice_every":5400000000000}`} {
		var back Limits
		if err := json.Unmarshal([]byte(s), &back); err != nil || back != l {
			t.Errorf("decode %s: %+v, %v; want %+v", s, back, err, l)
		}
	}
	var zero Limits
	if b, _ := json.Marshal(zero); string(b) != `{}` {
		t.Errorf("zero limits %s, want {}", b)
	}
	for _, s := range []string{`{"notice_every":"hourly"}`, `{"notice_every":true}`, `{"memory_percent":"x"}`} {
		if err := json.Unmarshal([]byte(s), &zero); err == nil {
			t.Errorf("limits %s decoded", s)
		}
	}
}

// TestObserveErrorText: Observe's errors give times in RFC 3339, never
// with the monotonic clock reading %v prints ("m=+0.000026882"), and fit
// on one line, however many problems a reading has.
func TestObserveErrorText(t *testing.T) {
	now := time.Now() // carries a monotonic reading
	tr := NewTracker("n1", Limits{})
	if _, err := tr.Observe(Reading{At: now, CPUs: 1, ConntrackMax: 100, MemoryUsedPercent: 10}); err != nil {
		t.Fatal(err)
	}
	stamp := now.Format(time.RFC3339Nano)
	tests := []struct {
		name string
		r    Reading
		want string
	}{
		{"invalid, two problems", Reading{At: now, CPUs: 0, ConntrackMax: 0, MemoryUsedPercent: 120},
			"observe reading of node \"n1\" at " + stamp + ": invalid reading"},
		{"version 1, out of order", Reading{At: now.Add(-time.Second), CPUs: 1, ConntrackMax: 100},
			"at " + now.Add(-time.Second).Format(time.RFC3339Nano) + ": reading out of order: the previous reading is at " + stamp},
		{"version 1, same time", Reading{At: now, CPUs: 1, ConntrackMax: 100}, "at " + stamp + ": duplicate reading"},
		{"another node", Reading{Node: "n2", At: now.Add(time.Second), CPUs: 1, ConntrackMax: 100},
			"observe reading at " + now.Add(time.Second).Format(time.RFC3339Nano) + ": reading is of node \"n2\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tr.Observe(tt.r)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if strings.Contains(msg, "m=+") || strings.Contains(msg, "\n") || !strings.Contains(msg, tt.want) {
				t.Errorf("error %q: want one line, no monotonic reading, holding %q", msg, tt.want)
			}
		})
	}
	_, err := tr.Observe(tests[0].r)
	if !errors.Is(err, ErrInvalidReading) || strings.Count(err.Error(), "; ") < 2 {
		t.Errorf("error %q: want ErrInvalidReading, each problem after \"; \"", err)
	}
}
