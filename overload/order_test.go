package overload

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// agentClock dates readings as an agent of ReadingVersion 2 does: within
// a process, the later of the wall clock and the previous reading's at
// plus the monotonic time elapsed; across a restart, the later of the
// wall clock and the saved at plus a second; with its state lost, a new
// run dated by the wall clock alone.
type agentClock struct {
	real   time.Time     // true time: what the monotonic clock measures
	offset time.Duration // wall clock minus true time
	run    string
	runs   int
	seq    uint64
	at     time.Time // the previous reading's at; zero after a restart
	saved  time.Time // the at saved with the state
}

func (c *agentClock) wall() time.Time { return c.real.Add(c.offset) }

// next advances true time by d and returns the next reading's run, seq
// and at.
func (c *agentClock) next(d time.Duration) (string, uint64, time.Time) {
	c.real = c.real.Add(d)
	switch {
	case c.run == "":
		c.runs++
		c.run, c.seq = fmt.Sprintf("%032x", c.runs), 0
		c.at = c.wall()
	case c.at.IsZero(): // first reading after a restart
		c.at = later(c.wall(), c.saved.Add(time.Second))
	default:
		c.at = later(c.wall(), c.at.Add(d))
	}
	c.seq++
	c.saved = c.at
	return c.run, c.seq, c.at
}

func (c *agentClock) restart()   { c.at = time.Time{} }
func (c *agentClock) loseState() { c.run, c.at, c.saved = "", time.Time{}, time.Time{} }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestClockSteps: a node's wall clock stepped forward and back by up to
// an hour, within a run and across restarts, and a run started afresh
// with its clock behind: a tracker fed the agent's version 2 readings
// (each delivered twice, as a retry after a lost answer does) counts each
// exactly once, reaches the verdicts of a tracker fed the same readings at
// their true times, and dates events and notices in order, at most one
// notice an hour of counted time.
func TestClockSteps(t *testing.T) {
	// What happens before the reading of each index.
	script := map[int][]happening{
		7:   {{"+", 290 * time.Second}}, // an NTP step
		9:   {{"-", 290 * time.Second}},
		15:  {{"+", time.Hour}},
		24:  {{"-", time.Hour}},
		31:  {{"-", time.Hour}},
		33:  {{"R", 0}},
		45:  {{"+", time.Hour}}, // back to true time
		52:  {{"+", 40 * time.Minute}},
		53:  {{"R", 0}},
		60:  {{"-", 100 * time.Minute}},
		61:  {{"L", 0}}, // new run, its clock an hour behind what was counted
		75:  {{"+", time.Hour}},
		80:  {{"R", 0}},
		88:  {{"-", time.Hour}},
		89:  {{"L", 0}},
		100: {{"R", 0}},
	}
	pattern := strings.Repeat("xxx..x.xxxx.....xx.x.x...xxx..", 5)

	for _, restoreEach := range []bool{false, true} {
		t.Run(fmt.Sprintf("restore state each reading %v", restoreEach), func(t *testing.T) {
			if runs := clockScript(t, script, pattern, restoreEach); runs != 3 {
				t.Fatalf("%d runs, want 3", runs)
			}
		})
	}
}

// TestClockStepsRandom: as TestClockSteps, for random scripts: steps of
// up to an hour either way, restarts, lost state, at random readings.
func TestClockStepsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 2))
	kinds := []string{"+", "-", "R", "L"}
	for i := range 100 {
		script := map[int][]happening{}
		for range rng.IntN(12) {
			k, at := kinds[rng.IntN(len(kinds))], rng.IntN(120)
			script[at] = append(script[at], happening{k, time.Duration(rng.Int64N(int64(time.Hour))) + time.Second})
		}
		var pattern strings.Builder
		for range 120 {
			pattern.WriteByte(".x"[rng.IntN(2)])
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			clockScript(t, script, pattern.String(), i%4 == 0)
		})
	}
}

// happening is what happens to the agent before a reading: +/- step
// the wall clock by d, R restart (a minute down), L restart with the
// state lost.
type happening struct {
	kind string
	d    time.Duration
}

// clockScript feeds a tracker the readings of pattern (x hot, . calm)
// as an agent takes them under script, each delivered twice, and checks
// them against a tracker fed the same readings at their true times. It
// returns how many runs the agent had.
func clockScript(t *testing.T, script map[int][]happening, pattern string, restoreEach bool) int {
	t.Helper()
	node := NewTracker("eu-01", Limits{NoticeEvery: 10 * time.Minute})
	ref := NewTracker("eu-01", Limits{NoticeEvery: 10 * time.Minute})
	clock := &agentClock{real: t0}
	var (
		lastAt     time.Time
		lastNotice time.Time
		counted    int
	)
	for i, c := range pattern {
		d := step
		for _, h := range script[i] {
			switch h.kind {
			case "+":
				clock.offset += h.d
			case "-":
				clock.offset -= h.d
			case "R":
				clock.restart()
				d += time.Minute
			case "L":
				clock.loseState()
				d += time.Minute
			}
		}
		run, seq, at := clock.next(d)
		r := calm(at)
		if c == 'x' {
			r = hot(at)
		}
		r.Version, r.Run, r.Seq = ReadingVersion, run, seq
		truth := calm(clock.real)
		if c == 'x' {
			truth = hot(clock.real)
		}

		res, err := node.Observe(r)
		if err != nil {
			t.Fatalf("reading %d (run %s seq %d at %v, true %v): %v", i, run, seq, at, clock.real, err)
		}
		counted++
		want := observe(t, ref, truth)
		if res.Overloaded != want.Overloaded || (res.Event == nil) != (want.Event == nil) ||
			(res.Event != nil && res.Event.Kind != want.Event.Kind) {
			t.Fatalf("reading %d: overloaded %v event %+v; at true times: overloaded %v event %+v",
				i, res.Overloaded, res.Event, want.Overloaded, want.Event)
		}
		if !res.At.After(lastAt) {
			t.Fatalf("reading %d counted at %v, not after the previous %v", i, res.At, lastAt)
		}
		if res.At.Before(r.At) {
			t.Fatalf("reading %d counted at %v, before its own at %v", i, res.At, r.At)
		}
		lastAt = res.At
		if res.Event != nil && !res.Event.At.Equal(res.At) {
			t.Fatalf("reading %d: event at %v, reading counted at %v", i, res.Event.At, res.At)
		}
		if n := res.Notice; n != nil {
			if !lastNotice.IsZero() && n.At.Sub(lastNotice) < 10*time.Minute {
				t.Fatalf("reading %d: notice at %v, %v after the previous", i, n.At, n.At.Sub(lastNotice))
			}
			lastNotice = n.At
		}

		// The retry of a reading whose answer was lost.
		before, _ := json.Marshal(node)
		if _, err := node.Observe(r); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("reading %d again: err %v, want ErrDuplicate", i, err)
		}
		if after, _ := json.Marshal(node); string(after) != string(before) {
			t.Fatalf("reading %d: a duplicate changed the state", i)
		}
		if restoreEach {
			node, _ = roundTrip(t, node)
		}
	}
	if counted != len(pattern) {
		t.Fatalf("%d readings counted of %d", counted, len(pattern))
	}
	evs := node.Events()
	for i := 1; i < len(evs); i++ {
		if evs[i].At.Before(evs[i-1].At) {
			t.Fatalf("event %d at %v before event %d at %v", i, evs[i].At, i-1, evs[i-1].At)
		}
	}
	return clock.runs
}

// TestVersion2Order: within a run, seq orders, not at; an older seq is a
// duplicate; a gap is counted; a new run starts wherever its seq begins.
func TestVersion2Order(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	v2 := func(run string, seq uint64, at time.Time) Reading {
		r := hot(at)
		r.Version, r.Run, r.Seq = ReadingVersion, run, seq
		return r
	}
	a, b := strings.Repeat("a", 32), strings.Repeat("b", 32)
	steps := []struct {
		r      Reading
		is     error
		wantAt time.Time
	}{
		{v2(a, 1, t0), nil, t0},
		{v2(a, 1, t0), ErrDuplicate, time.Time{}},   // a retry: the same reading again
		{v2(a, 5, t0.Add(step)), nil, t0.Add(step)}, // a gap of three
		{v2(a, 3, t0.Add(step)), ErrDuplicate, time.Time{}},
		{v2(a, 6, t0), nil, t0.Add(step + time.Second)}, // dated before the last: counted just after it
		{v2(b, 1, t0.Add(-time.Hour)), nil, t0.Add(step + 2*time.Second)},
		{v2(b, 2, t0.Add(time.Hour)), nil, t0.Add(time.Hour)},
		{v2(a, 7, t0.Add(time.Hour+step)), nil, t0.Add(time.Hour + step)}, // back to run a: another run
		{v2(a, 7, t0.Add(time.Hour+step)), ErrDuplicate, time.Time{}},
	}
	for i, s := range steps {
		res, err := tr.Observe(s.r)
		if s.is != nil {
			if !errors.Is(err, s.is) {
				t.Fatalf("step %d: err %v, want %v", i, err, s.is)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !res.At.Equal(s.wantAt) || !tr.LastReading().Equal(s.wantAt) {
			t.Fatalf("step %d: counted at %v (last reading %v), want %v", i, res.At, tr.LastReading(), s.wantAt)
		}
		for _, f := range res.Passed {
			if !f.At.Equal(res.At) {
				t.Fatalf("step %d: passed finding at %v, reading counted at %v", i, f.At, res.At)
			}
		}
	}
	if res := tr.Events(); len(res) != 1 || !res[0].At.Equal(t0.Add(step+time.Second)) {
		t.Fatalf("events %+v, want one start at the 3rd reading's counted time", res)
	}

	// The state keeps the run and seq: a retry after a restart is still
	// a duplicate.
	back, b2 := roundTrip(t, tr)
	if !strings.Contains(string(b2), `"last_run":"`+a+`","last_seq":7`) {
		t.Errorf("state %s lacks last_run and last_seq", b2)
	}
	if _, err := back.Observe(v2(a, 7, t0.Add(time.Hour+step))); !errors.Is(err, ErrDuplicate) {
		t.Errorf("retry after restore: err %v, want ErrDuplicate", err)
	}

	// A version 1 reading after version 2 ones is ordered by time, as
	// version 1 always was; a version 2 reading after it goes on with its
	// run, whose retries stay duplicates.
	if _, err := back.Observe(hot(t0.Add(time.Hour))); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("version 1 reading older than the last: err %v, want ErrOutOfOrder", err)
	}
	observe(t, back, hot(t0.Add(2*time.Hour)))
	if _, err := back.Observe(v2(a, 7, t0.Add(time.Hour+step))); !errors.Is(err, ErrDuplicate) {
		t.Errorf("retry of run a after a version 1 reading: err %v, want ErrDuplicate", err)
	}
	if res := observe(t, back, v2(a, 8, t0.Add(2*time.Hour))); !res.At.Equal(t0.Add(2*time.Hour + time.Second)) {
		t.Errorf("version 2 after version 1: counted at %v", res.At)
	}
}

// TestVersion1ClockStep: version 1 readings keep version 1's meaning: a
// clock stepped back makes readings out of order until it passes the
// last counted one.
func TestVersion1ClockStep(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	observe(t, tr, hot(t0.Add(290*time.Second)))
	for i := range 9 {
		if _, err := tr.Observe(hot(t0.Add(time.Duration(i) * step))); !errors.Is(err, ErrOutOfOrder) {
			t.Fatalf("reading %d, before the stepped one: err %v, want ErrOutOfOrder", i, err)
		}
	}
	if _, err := tr.Observe(hot(t0.Add(290 * time.Second))); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("same time: err %v, want ErrDuplicate", err)
	}
	observe(t, tr, hot(t0.Add(10*step)))
}

// TestOldStateRestores: a state saved before version 2 readings and
// duration strings (no last_run, lasted in nanoseconds) restores, keeps
// its figures, and takes version 2 readings as a new run.
func TestOldStateRestores(t *testing.T) {
	old := `{"v":1,"node":"eu-01","last_reading":"2026-11-30T12:05:00Z",
	"checks":{"memory":{"window":"00111","last":{"check":"memory","text":"memory at 92 %","at":"2026-11-30T12:05:00Z","value":92,"limit":90}}},
	"overloaded":true,"since":"2026-11-30T12:04:00Z","last_notice":"2026-11-30T12:04:00Z",
	"events":[{"kind":"start","at":"2026-11-30T12:00:00Z","findings":[{"check":"memory","text":"memory at 92 %","at":"2026-11-30T12:00:00Z","value":92,"limit":90}]},
	{"kind":"end","at":"2026-11-30T12:03:30Z","lasted_ns":210000000000},
	{"kind":"start","at":"2026-11-30T12:04:00Z","findings":[{"check":"memory","text":"memory at 92 %","at":"2026-11-30T12:04:00Z","value":92,"limit":90}]}]}`
	tr, err := RestoreTracker([]byte(old), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if e := tr.Events(); len(e) != 3 || e[1].Lasted != 210*time.Second {
		t.Fatalf("events %+v, want the end to have lasted 3m30s", e)
	}
	r := calm(t0.Add(time.Minute)) // the node's new clock is behind
	r.Version, r.Run, r.Seq = ReadingVersion, strings.Repeat("c", 32), 1
	res := observe(t, tr, r)
	if want := t0.Add(5*time.Minute + time.Second); !res.At.Equal(want) {
		t.Fatalf("first version 2 reading counted at %v, want %v", res.At, want)
	}
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "lasted_ns") || !strings.Contains(string(b), `"lasted":"3m30s"`) {
		t.Errorf("state %s: want lasted as a duration string", b)
	}
}

// TestReadingJSONVersion2: a version 2 reading decodes with its run and
// seq and encodes them again; one built in the process with a run goes
// out as version 2, one without as version 1.
func TestReadingJSONVersion2(t *testing.T) {
	s := strings.Replace(wire, `{"v":1,`, `{"v":2,"run":"0123456789abcdef0123456789abcdef","seq":42,`, 1)
	var r Reading
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatal(err)
	}
	if r.Version != 2 || r.Run != "0123456789abcdef0123456789abcdef" || r.Seq != 42 {
		t.Fatalf("decoded v %d run %q seq %d", r.Version, r.Run, r.Seq)
	}
	r.Version = 0
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"v":2,`) || !strings.Contains(string(b), `"run":"0123456789abcdef0123456789abcdef","seq":42`) {
		t.Errorf("encoded %s", b)
	}
	r.Run, r.Seq = "", 0
	if b, _ := json.Marshal(r); !strings.HasPrefix(string(b), `{"v":1,`) || strings.Contains(string(b), `"run"`) {
		t.Errorf("without a run encoded %s", b)
	}
}

// TestVersion2Rollback: a node rolled back to a snapshot goes on from an
// older seq of the same run, dated now. Its readings are no retries (a
// retry is never dated after the last counted reading), so they are
// counted at once rather than refused as duplicates until the seq passes
// the old last one, which would blind the window for as long as the
// snapshot is old.
func TestVersion2Rollback(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	run := strings.Repeat("c", 32)
	v2 := func(seq uint64, at time.Time) Reading {
		r := hot(at)
		r.Version, r.Run, r.Seq = ReadingVersion, run, seq
		return r
	}
	for i := uint64(1); i <= 100; i++ {
		observe(t, tr, v2(i, t0.Add(time.Duration(i)*step)))
	}
	last := tr.LastReading()
	// Rolled back to seq 40, a day later.
	for i := uint64(41); i <= 45; i++ {
		at := last.Add(24*time.Hour + time.Duration(i)*step)
		res := observe(t, tr, v2(i, at))
		if !res.At.Equal(at) {
			t.Fatalf("seq %d after the rollback counted at %v, want %v", i, res.At, at)
		}
	}
	// Its own retries are still duplicates.
	if _, err := tr.Observe(v2(45, last.Add(24*time.Hour+45*step))); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("retry after the rollback: err %v, want ErrDuplicate", err)
	}
	if !tr.Overloaded() {
		t.Fatal("readings after the rollback did not keep the node overloaded")
	}
}

// TestVersion2LateRetryFromEarlierRun: the answer to seq 7 of run A is
// lost, the node's state is lost with it and the agent starts run B;
// then A's seq 7 comes again (through another replica, or a queue
// restored from a backup). It was counted already, so it is a duplicate,
// and it does not make B's next reading look like the start of a run;
// a reading of A above its seq (two agents with one identity, or a node
// rolled back to before B) is still counted. The earlier runs survive a
// restart of the receiver.
func TestVersion2LateRetryFromEarlierRun(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	runA, runB := strings.Repeat("a", 32), strings.Repeat("b", 32)
	v2 := func(run string, seq uint64, at time.Time) Reading {
		r := hot(at)
		r.Version, r.Run, r.Seq = ReadingVersion, run, seq
		return r
	}
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * step) }
	for i := 1; i <= 7; i++ {
		observe(t, tr, v2(runA, uint64(i), at(i)))
	}
	for i := 1; i <= 3; i++ {
		observe(t, tr, v2(runB, uint64(i), at(7+i)))
	}
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"earlier_runs":[{"run":"`+runA+`","seq":7}]`) {
		t.Fatalf("state %s does not keep run A at seq 7", b)
	}
	tr, err = RestoreTracker(b, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 7; seq++ {
		if _, err := tr.Observe(v2(runA, seq, at(int(seq)))); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("late retry of run A seq %d: err %v, want ErrDuplicate", seq, err)
		}
	}
	res := observe(t, tr, v2(runB, 4, at(11)))
	if !res.At.Equal(at(11)) {
		t.Fatalf("run B seq 4 counted at %v, want %v", res.At, at(11))
	}
	if _, err := tr.Observe(v2(runB, 2, at(9))); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("retry of run B seq 2: err %v, want ErrDuplicate", err)
	}
	// Run A above its seq is no retry: counted, and B becomes an earlier
	// run whose retries are duplicates.
	observe(t, tr, v2(runA, 8, at(12)))
	if _, err := tr.Observe(v2(runB, 4, at(11))); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("retry of run B seq 4 after run A went on: err %v, want ErrDuplicate", err)
	}
	// Only the latest few runs are kept.
	for i := range 2 * maxEarlierRuns {
		observe(t, tr, v2(fmt.Sprintf("%032d", i), 1, at(13+i)))
	}
	if n := len(tr.earlier); n != maxEarlierRuns {
		t.Fatalf("%d earlier runs kept, want %d", n, maxEarlierRuns)
	}
}

// Bad earlier runs in a saved state are refused with what is wrong.
func TestRestoreBadEarlierRuns(t *testing.T) {
	run := strings.Repeat("a", 32)
	base := `{"v":1,"node":"n","last_reading":"2026-11-30T12:00:00Z","last_run":"` + run + `","last_seq":3,"overloaded":false,"earlier_runs":`
	for _, tt := range []struct{ earlier, want string }{
		{`[{"run":"no spaces please","seq":1}]`, "is not a run id"},
		{`[{"run":"` + strings.Repeat("b", 32) + `","seq":0}]`, "seq 0"},
		{`[{"run":"` + run + `","seq":1}]`, "listed twice"},
		{`[{"run":"b1","seq":1},{"run":"b2","seq":1},{"run":"b3","seq":1},{"run":"b4","seq":1},{"run":"b5","seq":1}]`, "more than 4"},
	} {
		_, err := RestoreTracker([]byte(base+tt.earlier+"}"), Limits{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("earlier_runs %s: err %v, want one naming %q", tt.earlier, err, tt.want)
		}
	}
}
