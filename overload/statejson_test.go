package overload

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unicode/utf8"
)

// toJSON returns e as encoding/json encoded it in a trackerState, and as
// Event.MarshalJSON encoded it before appendEvent.
func (e Event) toJSON() eventJSON {
	j := eventJSON{Kind: e.Kind, At: e.At, Findings: e.Findings}
	if e.Lasted != 0 {
		j.Lasted = e.Lasted.String()
	}
	return j
}

// marshalReference encodes tr's state as MarshalJSON did before it was
// written by hand: a trackerState, its checks in a map, through
// encoding/json. MarshalJSON must give the same bytes, and refuse the
// same states.
func marshalReference(tr *Tracker) ([]byte, error) {
	return json.Marshal(referenceState(tr))
}

// referenceState returns tr's state as marshalReference encodes it.
func referenceState(tr *Tracker) trackerState {
	s := trackerState{
		Version:    stateVersion,
		Node:       tr.node,
		Last:       tr.last,
		Run:        tr.run,
		Seq:        tr.seq,
		Overloaded: tr.Overloaded(),
		Since:      tr.since,
		LastNotice: tr.lastNotice,
	}
	for _, m := range tr.earlier {
		s.Earlier = append(s.Earlier, runJSON{Run: m.run, Seq: m.seq})
	}
	if len(tr.events) > 0 {
		s.Events = make([]eventJSON, len(tr.events))
		for i, e := range tr.events {
			s.Events[i] = e.toJSON()
		}
	}
	for i, c := range checks() {
		st := tr.checks[i]
		if len(st.window) == 0 && st.last == nil {
			continue
		}
		w := make([]byte, len(st.window))
		for j, p := range st.window {
			w[j] = '0'
			if p {
				w[j] = '1'
			}
		}
		if s.Checks == nil {
			s.Checks = make(map[Check]checkJSON)
		}
		s.Checks[c] = checkJSON{Window: string(w), Last: st.last}
	}
	return s
}

// stateStrings returns every string tr's state holds.
func stateStrings(tr *Tracker) []string {
	out := []string{tr.node, tr.run}
	finding := func(f *Finding) { out = append(out, string(f.Check), f.Text, f.Link) }
	for _, m := range tr.earlier {
		out = append(out, m.run)
	}
	for i := range tr.checks {
		if f := tr.checks[i].last; f != nil {
			finding(f)
		}
	}
	for i := range tr.events {
		out = append(out, string(tr.events[i].Kind))
		for j := range tr.events[i].Findings {
			finding(&tr.events[i].Findings[j])
		}
	}
	return out
}

// sameEncoding fails tb when MarshalJSON and marshalReference disagree on
// tr: other bytes, or one refusing the state and the other not. So must
// each event's MarshalJSON and encoding/json. When no string in the
// state needs escaping, the state must fit the slice stateSize sized.
// sameEncoding returns the state, or nil when both refuse it.
func sameEncoding(tb testing.TB, tr *Tracker) []byte {
	tb.Helper()
	plain := true // no string in the state needs escaping
	for _, s := range stateStrings(tr) {
		if len(appendString(nil, s)) != len(s)+len(`""`) {
			plain = false
		}
	}
	got, err := tr.MarshalJSON()
	want, wantErr := marshalReference(tr)
	switch {
	case (err != nil) != (wantErr != nil):
		tb.Fatalf("MarshalJSON: %s, %v\nencoding/json: %s, %v", got, err, want, wantErr)
	case err != nil:
		if got != nil {
			tb.Fatalf("MarshalJSON refused the state (%v) and returned %q", err, got)
		}
	case !bytes.Equal(got, want):
		tb.Fatalf("MarshalJSON:\n%s\nencoding/json:\n%s", got, want)
	}
	for i, e := range tr.events {
		got, err := e.MarshalJSON()
		want, wantErr := json.Marshal(e.toJSON())
		switch {
		case (err != nil) != (wantErr != nil):
			tb.Fatalf("event %d: MarshalJSON: %s, %v\nencoding/json: %s, %v", i, got, err, want, wantErr)
		case err == nil && !bytes.Equal(got, want):
			tb.Fatalf("event %d: MarshalJSON:\n%s\nencoding/json:\n%s", i, got, want)
		case err == nil && plain && len(got) > eventSize(&e):
			tb.Fatalf("event %d: %d bytes, more than eventSize's %d: %s", i, len(got), eventSize(&e), got)
		}
	}
	if err != nil {
		return nil
	}
	if n := tr.stateSize(); plain && len(got) > n {
		tb.Fatalf("state of %d bytes, more than stateSize's %d: %s", len(got), n, got)
	}
	return got
}

// sameAfterRestore fails tb when the tracker RestoreTracker makes of
// state (tr's) marshals otherwise. A string in tr that is not UTF-8 is
// not kept as it was (its bytes are written as U+FFFD), so such a state
// is not checked.
func sameAfterRestore(tb testing.TB, tr *Tracker, state []byte) {
	tb.Helper()
	for _, s := range stateStrings(tr) {
		if !utf8.ValidString(s) {
			return
		}
	}
	back, err := RestoreTracker(state, tr.Limits())
	if err != nil {
		tb.Fatalf("RestoreTracker(%s): %v", state, err)
	}
	again := sameEncoding(tb, back)
	if !bytes.Equal(again, state) {
		tb.Fatalf("restored from\n%s\nthe tracker marshals to\n%s", state, again)
	}
}

// ofRun returns r as a version 2 reading of run, numbered seq.
func ofRun(r Reading, run string, seq uint64) Reading {
	r.Version, r.Run, r.Seq = ReadingVersion, run, seq
	return r
}

// trackerCases are tracker states built through the API, as a platform
// builds them, each a function of the test that builds it.
var trackerCases = []struct {
	name  string
	build func(t *testing.T) *Tracker
}{
	{"zero tracker", func(t *testing.T) *Tracker { return &Tracker{} }},
	{"no reading yet", func(t *testing.T) *Tracker { return NewTracker("eu-01", Limits{}) }},
	{"one calm reading", func(t *testing.T) *Tracker {
		tr := NewTracker("eu-01", Limits{})
		observe(t, tr, calm(t0))
		return tr
	}},
	{"overloaded", func(t *testing.T) *Tracker {
		tr := NewTracker("eu-01", Limits{})
		feed(t, tr, t0, "xxx")
		return tr
	}},
	{"in and out twice", func(t *testing.T) *Tracker {
		tr := NewTracker("eu-01", Limits{})
		feed(t, tr, t0, "xxx....x.xx.x...")
		return tr
	}},
	{"every check, off UTC, to the nanosecond", func(t *testing.T) *Tracker {
		tr := NewTracker("eu-01", Limits{})
		at := t0.Add(123456789).In(time.FixedZone("IST", 5*3600+30*60))
		for i := range 4 {
			r := calm(at.Add(time.Duration(i) * step))
			r.MemoryUsedPercent = 95.25
			r.Load15 = 17.3
			r.ConntrackEntries = 222822
			r.ConntrackDrops = 37
			r.ListenDrops = 12
			r.Links = append(r.Links, Link{Name: "wlan<0>&", RxBitsPerSecond: 9.5e8, SpeedMbps: 1000})
			observe(t, tr, r)
		}
		observe(t, tr, calm(at.Add(4*step)))
		return tr
	}},
	{"strings to escape", func(t *testing.T) *Tracker {
		tr := NewTracker("nœud <1> & \"deux\"\\\t\n\x01\u2028\u2029\x7f", Limits{})
		for i := range 3 {
			r := hot(t0.Add(time.Duration(i) * step))
			r.Node = ""
			r.Links = []Link{{Name: "e\xffth\u00e9\u2029</script>", TxBitsPerSecond: 9e8, SpeedMbps: 1000}}
			observe(t, tr, r)
		}
		return tr
	}},
	{"tiny and huge figures", func(t *testing.T) *Tracker {
		tr := NewTracker("eu-01", Limits{BandwidthPercent: 1e-8, MemoryPercent: 1e-7})
		for i, rate := range []float64{5e5, 2e6, 1e14} {
			r := calm(t0.Add(time.Duration(i) * step))
			r.MemoryUsedPercent = 1e-6 * float64(i+1) / 3
			r.Links = []Link{{Name: "eth0", RxBitsPerSecond: rate, SpeedMbps: 100_000_000}}
			observe(t, tr, r)
		}
		return tr
	}},
	{"version 2, runs and retries", func(t *testing.T) *Tracker {
		tr := NewTracker("eu-01", Limits{})
		at := t0
		for i, s := range []struct {
			run string
			seq uint64
			hot bool
		}{
			{"a", 1, true}, {"a", 2, true}, {"a", 2, true}, {"b", 1, true}, {"c", 7, false},
			{"a", 2, false}, {"d", 1, false}, {"e", 1, false}, {"f", 3, true}, {"f", 4, true},
			{"g", 1, true}, {"g", 2, false}, {"g", 1, false},
		} {
			r := calm(at)
			if s.hot {
				r = hot(at)
			}
			if i%4 == 3 {
				r.At = at.Add(-time.Hour) // dated before the last: counted a second after it
			}
			tr.Observe(ofRun(r, s.run, s.seq)) // retries are refused, and change nothing
			at = at.Add(step)
		}
		if len(tr.earlier) != maxEarlierRuns {
			t.Fatalf("%d earlier runs, want %d", len(tr.earlier), maxEarlierRuns)
		}
		return tr
	}},
	{"version 2, then version 1", func(t *testing.T) *Tracker {
		tr := NewTracker("eu-01", Limits{})
		observe(t, tr, ofRun(hot(t0), "a", 1))
		observe(t, tr, ofRun(hot(t0.Add(step)), "b", 5))
		observe(t, tr, hot(t0.Add(2*step)))
		return tr
	}},
	{"oldest events dropped", func(t *testing.T) *Tracker {
		tr := NewTracker("eu-01", Limits{MaxEvents: 3, NoticeEvery: time.Nanosecond})
		feed(t, tr, t0, "xxx...xxx...xxx...xxx")
		return tr
	}},
	{"window longer than the limits'", func(t *testing.T) *Tracker {
		tr := NewTracker("eu-01", Limits{Window: 9, Need: 2})
		feed(t, tr, t0, "x.x.x.x.x")
		tr.SetLimits(Limits{Window: 2, Need: 1})
		return tr
	}},
	{"notice recorded", func(t *testing.T) *Tracker {
		tr := NewTracker("eu-01", Limits{})
		feed(t, tr, t0, "..")
		tr.RecordNotice(t0.Add(time.Hour + 1))
		return tr
	}},
	{"restored from an old state", func(t *testing.T) *Tracker {
		tr, err := RestoreTracker([]byte(`{"v":1,"node":"eu-01","last_reading":"2026-11-30T12:00:00Z",`+
			`"events":[{"kind":"start","at":"2026-11-30T11:00:00Z"},{"kind":"end","at":"2026-11-30T11:30:00Z","lasted_ns":1800000000000}]}`), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		feed(t, tr, t0.Add(step), "xxx")
		return tr
	}},
}

// TestTrackerMarshalJSON: for states built through the API, MarshalJSON
// gives encoding/json's bytes, and RestoreTracker gives a tracker that
// marshals to them again.
func TestTrackerMarshalJSON(t *testing.T) {
	for _, tc := range trackerCases {
		t.Run(tc.name, func(t *testing.T) {
			tr := tc.build(t)
			state := sameEncoding(t, tr)
			if state == nil {
				t.Fatal("state refused")
			}
			sameAfterRestore(t, tr, state)
		})
	}
}

// TestTrackerMarshalJSONRefuses: a state encoding/json cannot write (a
// time RFC 3339 cannot write, a figure that is not finite) is refused, as
// encoding/json refuses it.
func TestTrackerMarshalJSONRefuses(t *testing.T) {
	afterAnOverload := func(t *testing.T) *Tracker {
		tr := NewTracker("eu-01", Limits{})
		feed(t, tr, t0, "xxx...")
		return tr
	}
	tests := []struct {
		name  string
		build func(t *testing.T) *Tracker
	}{
		{"zone a day off UTC", func(t *testing.T) *Tracker {
			tr := NewTracker("eu-01", Limits{})
			observe(t, tr, hot(t0.In(time.FixedZone("", 24*3600))))
			return tr
		}},
		{"latest reading in year 10000", func(t *testing.T) *Tracker {
			tr := afterAnOverload(t)
			tr.last = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
			return tr
		}},
		{"latest notice in year -1", func(t *testing.T) *Tracker {
			tr := afterAnOverload(t)
			tr.lastNotice = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)
			return tr
		}},
		{"latest finding NaN", func(t *testing.T) *Tracker {
			tr := afterAnOverload(t)
			tr.checks[CheckMemory.index()].last.Value = math.NaN()
			return tr
		}},
		{"event's finding infinite", func(t *testing.T) *Tracker {
			tr := afterAnOverload(t)
			tr.events[0].Findings[0].Limit = math.Inf(-1)
			return tr
		}},
		{"event in year 12000", func(t *testing.T) *Tracker {
			tr := afterAnOverload(t)
			tr.events[1].At = time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)
			return tr
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := tc.build(t)
			if b := sameEncoding(t, tr); b != nil {
				t.Fatalf("state %s, want an error", b)
			}
			if _, err := json.Marshal(tr); err == nil {
				t.Fatal("json.Marshal of the tracker: no error")
			}
		})
	}
}

// TestTrackerMarshalJSONAllocs: MarshalJSON allocates the state's slice
// and nothing else.
func TestTrackerMarshalJSONAllocs(t *testing.T) {
	tr := busyTracker(t, 4)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := tr.MarshalJSON(); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("MarshalJSON: %v allocations, want 1", n)
	}
}

// TestAppendFloat: appendFloat writes what encoding/json writes, at the
// edges of its two forms and for random bit patterns, and refuses what
// it refuses.
func TestAppendFloat(t *testing.T) {
	fs := []float64{
		0, math.Copysign(0, -1), 1, -1, 0.1, 92.7, 1e-6, math.Nextafter(1e-6, 0), 9.999999e-7, 1e-7, 1.5e-9,
		1e-10, 1e-100, 5e-324, 1e20, 5e20, math.Nextafter(1e21, 0), 1e21, -1e21, 1.2345678901234567e22, 1e100,
		math.MaxFloat64, -math.MaxFloat64, 123456789012345680000, 0.0000012345678901234567,
		2, 34, 80, -5, 1e15 - 1, 1e15, 1e15 + 1, -1e15, 1 << 53, 1<<53 + 2, -(1 << 53), 1e17,
		math.NaN(), math.Inf(1), math.Inf(-1),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		fs = append(fs, math.Float64frombits(rng.Uint64()), float64(rng.Int64N(1<<55)-1<<54))
	}
	for _, f := range fs {
		got, err := appendFloat(nil, f)
		want, wantErr := json.Marshal(f)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("appendFloat(%v) = %s, %v; encoding/json: %s, %v", f, got, err, want, wantErr)
		}
		if len(got) > maxFloatLen {
			t.Fatalf("appendFloat(%v) = %s, longer than %d", f, got, maxFloatLen)
		}
	}
}

// TestAppendString: appendString writes what encoding/json writes for
// every byte on its own, and for strings of escapes, runes and bytes that
// are not UTF-8.
func TestAppendString(t *testing.T) {
	var ss []string
	for c := range 256 {
		ss = append(ss, string(rune(c)), string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+"z")
	}
	ss = append(ss, "", "eu-01", "<script>&amp;</script>", "\\u2028 \u2028\u2029\u202a", "é\xc3\xff\xed\xa0\x80\xf4\x90\x80\x80",
		"\U0001F600 \xf0\x9f\x98", "\"\\\\\"", "\x00\x1f\x7f\u00a0\ufeff\ufffd")
	for _, s := range ss {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendString(%q) = %s, encoding/json %s", s, got, want)
		}
	}
}

// FuzzTrackerMarshal drives a tracker with readings made of the fuzzer's
// figures (each byte of steps one reading: which checks pass, version
// 1 or 2, of which run, a retry, dated forward or back), and holds
// MarshalJSON to encoding/json's bytes and errors, and to RestoreTracker's
// round trip. Then it sets the latest notice's time and the figure of a
// finding to the fuzzer's (years beyond 9999, NaN) and compares again.
func FuzzTrackerMarshal(f *testing.F) {
	f.Add("eu-01", "eth0", []byte{1, 1, 1, 0, 0, 0}, uint8(0), 92.5, int64(0), int64(1764504000), int32(0))
	f.Add("eu-01", "eth0", []byte{0x0f, 0x1f, 0x2f, 0x3f, 0x4f, 0x8f, 0x0e, 0x08}, uint8(0x5a), 99.125, int64(123456789), int64(-62135596800), int32(330))
	f.Add("n<&>\u2028", "e\xffth", []byte{7, 7, 7, 0x80, 6, 0}, uint8(0xff), 1e-7, int64(999999999), int64(253402300800), int32(-1440))
	f.Add("", "", []byte{5, 5, 5, 5, 5, 5, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(1), math.NaN(), int64(1), int64(-62167219200), int32(1439))
	f.Add("eu-01", "eth0", []byte{5, 5, 5}, uint8(0), 5e20, int64(0), int64(0), int32(0))
	f.Add("eu-01", "eth0", []byte{5, 5, 5}, uint8(0), -1e-300, int64(0), int64(0), int32(0))
	runs := [...]string{"r1", "r2", "r3", "r4"}
	f.Fuzz(func(t *testing.T, node, link string, steps []byte, limits uint8, figure float64, nanos, unix int64, zone int32) {
		if len(steps) > 300 {
			steps = steps[:300]
		}
		l := Limits{Window: 1 + int(limits&7), MaxEvents: 1 + int(limits>>6)*3}
		l.Need = 1 + int(limits>>3&7)%l.Window
		if limits&0x20 != 0 {
			l.NoticeEvery = time.Minute
		}
		if link == "" {
			link = "eth0"
		}
		memory := 92.0
		if figure >= 0 && figure <= 100 {
			memory = figure
		}
		tr := NewTracker(node, l)
		// Zones are whole minutes off UTC, as RFC 3339 writes them: one a
		// few seconds off is written +00:00 and read back as UTC.
		loc := time.FixedZone("", int(zone%(30*60))*60)
		at := t0.Add(time.Duration(nanos % int64(24*time.Hour))).In(loc)
		var seqs [len(runs)]uint64
		for _, c := range steps {
			r := calm(at)
			r.Node = ""
			if c&1 != 0 {
				r.MemoryUsedPercent = memory
			}
			if c&2 != 0 {
				r.ConntrackDrops = uint64(c)
			}
			r.Links[0].Name = link
			if c&4 != 0 {
				r.Links[0].TxBitsPerSecond = 9e8 + float64(c)
			}
			if c&8 != 0 {
				i := int(c>>4) & 3
				if c&0x40 == 0 || seqs[i] == 0 {
					seqs[i]++
				}
				r = ofRun(r, runs[i], seqs[i])
			}
			if c&0x80 != 0 {
				at = at.Add(-step)
			} else {
				at = at.Add(step)
			}
			r.At = at
			tr.Observe(r) // a refused reading changes nothing
		}
		if state := sameEncoding(t, tr); state != nil {
			sameAfterRestore(t, tr, state)
		}

		tr.lastNotice = time.Unix(unix, nanos).In(loc)
		for i := range tr.checks {
			if f := tr.checks[i].last; f != nil {
				f.Value = figure
				break
			}
		}
		if len(tr.events) > 0 {
			e := &tr.events[len(tr.events)-1]
			e.Lasted = time.Duration(nanos)
			if len(e.Findings) > 0 {
				e.Findings[0].Limit = -figure
			}
		}
		sameEncoding(t, tr)
	})
}
