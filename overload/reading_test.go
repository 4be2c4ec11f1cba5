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

// wire is a reading in the wire format, as an agent sends it.
const wire = `{"v":1,"node":"eu-01","at":"2026-11-30T12:00:30Z",
 "memory_used_percent":92.4,"load15":17.3,"cpus":8,
 "conntrack_entries":222822,"conntrack_max":262144,"conntrack_drops":37,
 "listen_drops":14,"listeners":[{"addr":"0.0.0.0:443","queue":128,"backlog":128}],
 "links":[{"name":"eth0","rx_bps":870000000,"tx_bps":12000000,"speed_mbps":1000}],
 "missing":["bandwidth"],"notes":["eth1: speed unknown"]}`

func TestReadingJSON(t *testing.T) {
	var r Reading
	if err := json.Unmarshal([]byte(wire), &r); err != nil {
		t.Fatal(err)
	}
	want := Reading{
		Version: 1, Node: "eu-01", At: time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC),
		MemoryUsedPercent: 92.4, Load15: 17.3, CPUs: 8,
		ConntrackEntries: 222822, ConntrackMax: 262144, ConntrackDrops: 37,
		ListenDrops: 14, Listeners: []Listener{{Addr: "0.0.0.0:443", Queue: 128, Backlog: 128}},
		Links:   []Link{{Name: "eth0", RxBitsPerSecond: 870e6, TxBitsPerSecond: 12e6, SpeedMbps: 1000}},
		Missing: []Input{InputBandwidth}, Notes: []string{"eth1: speed unknown"},
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("decoded\n %+v\nwant\n %+v", r, want)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Reading
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip: %v\n %+v", err, back)
	}
	// The wire names are stable: every one of them is in the encoding.
	for _, name := range []string{`"v":1`, `"node"`, `"at"`, `"memory_used_percent"`, `"load15"`, `"cpus"`,
		`"conntrack_entries"`, `"conntrack_max"`, `"conntrack_drops"`, `"listen_drops"`, `"listeners"`,
		`"links"`, `"rx_bps"`, `"tx_bps"`, `"speed_mbps"`, `"missing"`, `"notes"`} {
		if !strings.Contains(string(b), name) {
			t.Errorf("encoding lacks %s: %s", name, b)
		}
	}
	// A reading built in the process (Version 0) goes out as version 1.
	r.Version = 0
	b, _ = json.Marshal(r)
	if !strings.HasPrefix(string(b), `{"v":1,`) {
		t.Errorf("version 0 encoded as %.20s", b)
	}
	fs := Evaluate(want, Limits{})
	var texts []string
	for _, f := range fs {
		texts = append(texts, f.Text)
	}
	if got, w := strings.Join(texts, "; "), "memory at 92 %; load average 17.3 over 15 minutes, above twice the 8 CPU cores; "+
		"the connection table at 85 % (222822 of 262144); the connection table was full: 37 connections dropped; "+
		"listen queues were full: 14 connections dropped"; got != w {
		t.Errorf("findings\n %s\nwant\n %s", got, w)
	}
}

func TestReadingJSONRefused(t *testing.T) {
	ok := func(edit func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(wire), &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	bad := map[string]string{
		"empty":            ``,
		"not json":         `{"v":1,`,
		"array":            `[1]`,
		"null fields":      `{"v":1,"at":null}`,
		"no version":       ok(func(m map[string]any) { delete(m, "v") }),
		"version 3":        ok(func(m map[string]any) { m["v"] = 3 }),
		"version 1 run":    ok(func(m map[string]any) { m["run"], m["seq"] = "abc", 1 }),
		"seq without run":  ok(func(m map[string]any) { m["v"], m["seq"] = 2, 1 }),
		"run without seq":  ok(func(m map[string]any) { m["v"], m["run"] = 2, "abc" }),
		"before 2000":      ok(func(m map[string]any) { m["at"] = "1970-01-01T00:00:00Z" }),
		"version 0":        ok(func(m map[string]any) { m["v"] = 0 }),
		"negative memory":  ok(func(m map[string]any) { m["memory_used_percent"] = -3 }),
		"memory above 100": ok(func(m map[string]any) { m["memory_used_percent"] = 100.5 }),
		"negative load":    ok(func(m map[string]any) { m["load15"] = -0.1 }),
		"negative drops":   ok(func(m map[string]any) { m["conntrack_drops"] = -1 }),
		"fractional cpus":  ok(func(m map[string]any) { m["cpus"] = 1.5 }),
		"no cpus":          ok(func(m map[string]any) { m["cpus"] = 0 }),
		"negative cpus":    ok(func(m map[string]any) { m["cpus"] = -8 }),
		"no conntrack max": ok(func(m map[string]any) { m["conntrack_max"] = 0 }),
		"bad time":         ok(func(m map[string]any) { m["at"] = "yesterday" }),
		"no time":          ok(func(m map[string]any) { delete(m, "at") }),
		"memory as string": ok(func(m map[string]any) { m["memory_used_percent"] = "92" }),
		"unknown missing":  ok(func(m map[string]any) { m["missing"] = []string{"disk"} }),
		"link no name":     ok(func(m map[string]any) { m["links"] = []map[string]any{{"rx_bps": 1}} }),
		"link twice":       ok(func(m map[string]any) { m["links"] = []map[string]any{{"name": "a"}, {"name": "a"}} }),
		"negative rate":    ok(func(m map[string]any) { m["links"] = []map[string]any{{"name": "a", "tx_bps": -1}} }),
		"huge rate":        strings.Replace(wire, `"rx_bps":870000000`, `"rx_bps":1e400`, 1),
	}
	for name, s := range bad {
		var r Reading
		err := json.Unmarshal([]byte(s), &r)
		if err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, r)
			continue
		}
		var syntax *json.SyntaxError
		if !errors.Is(err, ErrInvalidReading) && !errors.As(err, &syntax) {
			t.Errorf("%s: err %v, want ErrInvalidReading", name, err)
		}
		if !reflect.DeepEqual(r, Reading{}) {
			t.Errorf("%s: refused reading was stored: %+v", name, r)
		}
	}
	// Inputs listed missing excuse their zero figures.
	s := ok(func(m map[string]any) {
		m["cpus"], m["conntrack_max"] = 0, 0
		m["missing"] = []string{"load", "conntrack"}
	})
	var r Reading
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Errorf("load and conntrack missing: %v", err)
	}
}

func TestReadingValidateNaN(t *testing.T) {
	for _, edit := range []func(*Reading){
		func(r *Reading) { r.MemoryUsedPercent = math.NaN() },
		func(r *Reading) { r.Load15 = math.NaN() },
		func(r *Reading) { r.Load15 = math.Inf(1) },
		func(r *Reading) { r.Links[0].TxBitsPerSecond = math.NaN() },
		func(r *Reading) { r.Version = 3 },
	} {
		r := calm(t0)
		edit(&r)
		if err := r.Validate(); !errors.Is(err, ErrInvalidReading) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidReading", r, err)
		}
		if _, err := json.Marshal(r); err == nil && r.Version != 3 {
			t.Errorf("a NaN reading encoded without error")
		}
		// Evaluate does not validate, but a NaN figure passes nothing.
		if math.IsInf(r.Load15, 0) {
			continue
		}
		for _, f := range Evaluate(r, Limits{}) {
			t.Errorf("NaN reading passed %s", f.Check)
		}
	}
}

// FuzzReadingJSON: any input decodes to a valid reading or an error,
// never a panic; a decoded reading re-encodes to itself and can be
// observed.
func FuzzReadingJSON(f *testing.F) {
	f.Add([]byte(wire))
	f.Add([]byte(`{"v":1,"at":"2026-11-30T12:00:00Z","cpus":1,"conntrack_max":1}`))
	f.Add([]byte(`{"v":1,"at":"2026-11-30T12:00:00Z","missing":["load","conntrack"],"links":[{"name":"x","speed_mbps":1,"rx_bps":1e300}]}`))
	f.Add([]byte(`{"v":1,"at":"2026-11-30T12:00:00Z","memory_used_percent":1e309}`))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`{"v":2,"run":"0123456789abcdef0123456789abcdef","seq":7,"at":"2026-11-30T12:00:00Z","cpus":1,"conntrack_max":1}`))
	f.Add([]byte(`{"v":1,"at":"2199-12-31T23:59:59.999999999Z","cpus":65536,"load15":4194304,"conntrack_max":4294967295,"conntrack_entries":42949672949}`))
	f.Add([]byte(`{"v":1,"at":"2026-11-30T12:00:00Z","cpus":1,"conntrack_max":1,"links":[{"name":"x","speed_mbps":100000000,"rx_bps":1e14}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"v":1,"at":"0001-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Reading
		if err := json.Unmarshal(b, &r); err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decoded an invalid reading: %v", err)
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var back Reading
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("decode of own encoding %s: %v", out, err)
		}
		tr := NewTracker(r.Node, Limits{})
		res, err := tr.Observe(r)
		if err != nil {
			t.Fatalf("observe a valid reading: %v", err)
		}
		for _, f := range res.Findings {
			if f.Text == "" || f.Check.index() < 0 {
				t.Fatalf("finding %+v", f)
			}
		}
		// Nothing a valid reading carries can make the state unsavable.
		state, err := json.Marshal(tr)
		if err != nil {
			t.Fatalf("marshal the state after %s: %v", b, err)
		}
		if _, err := RestoreTracker(state, Limits{}); err != nil {
			t.Fatalf("restore %s: %v", state, err)
		}
	})
}

// FuzzTrackerState: any state decodes to a tracker or an error, never a
// panic, and a decoded tracker observes readings without panicking.
func FuzzTrackerState(f *testing.F) {
	tr := NewTracker("eu-01", Limits{})
	for i := range 4 {
		tr.Observe(hot(t0.Add(time.Duration(i) * step)))
	}
	b, _ := json.Marshal(tr)
	f.Add(b)
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"v":1,"last_reading":"2026-11-30T12:00:00Z","last_run":"b","last_seq":2,"earlier_runs":[{"run":"a","seq":7}]}`))
	f.Add([]byte(`{"v":1,"checks":{"memory":{"window":"111111111"}}}`))
	f.Add([]byte(`{"v":1,"overloaded":true,"since":"2026-11-30T12:00:00Z","last_reading":"2026-11-30T12:00:00Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := RestoreTracker(b, Limits{})
		if err != nil {
			return
		}
		at := tr.LastReading().Add(step)
		if tr.LastReading().IsZero() {
			at = t0
		}
		if at.Before(minReadingTime) || !at.Add(6*step).Before(maxReadingTime) {
			return // no valid reading can follow a state restored with such a time
		}
		for i := range 6 {
			r := hot(at.Add(time.Duration(i) * step))
			r.Node = tr.Node()
			if _, err := tr.Observe(r); err != nil {
				t.Fatalf("observe after restore: %v", err)
			}
		}
		if !tr.Overloaded() {
			t.Fatalf("6 hot readings after restore and not overloaded")
		}
	})
}

// TestReadingBounds: figures that cannot be true of any machine are
// refused, each named by its wire field; figures at the edge of the
// possible are kept.
func TestReadingBounds(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Reading)
		field string // in the error; "" when the reading is valid
	}{
		{"a reported 1e307 bit/s on 1 Mbit/s", func(r *Reading) { r.Links[0] = Link{Name: "eth0", RxBitsPerSecond: 1e307, SpeedMbps: 1} }, "link eth0: rx_bps 1e+307, above"},
		{"rate 1000 times the speed", func(r *Reading) { r.Links[0] = Link{Name: "eth0", TxBitsPerSecond: 1.0001e9, SpeedMbps: 1} }, "link eth0: tx_bps 1.0001e+09 bit/s, more than 1000 times the link's 1 Mbit/s"},
		{"rate 999 times the speed", func(r *Reading) { r.Links[0] = Link{Name: "eth0", TxBitsPerSecond: 999e6, SpeedMbps: 1} }, ""},
		{"rate absurd, speed unknown", func(r *Reading) { r.Links[0] = Link{Name: "eth0", RxBitsPerSecond: 2e14} }, "link eth0: rx_bps 2e+14"},
		{"rate 100 Tbit/s, speed unknown", func(r *Reading) { r.Links[0] = Link{Name: "eth0", RxBitsPerSecond: 1e14} }, ""},
		{"speed unknown read as unsigned", func(r *Reading) { r.Links[0].SpeedMbps = 1<<32 - 1 }, "link eth0: speed_mbps 4294967295"},
		{"second link", func(r *Reading) { r.Links = append(r.Links, Link{Name: "eth1", RxBitsPerSecond: -1}) }, "link eth1: rx_bps -1, want zero or more"},
		{"link NaN", func(r *Reading) { r.Links[0].RxBitsPerSecond = math.NaN() }, "link eth0: rx_bps NaN, want a finite figure"},
		{"link without a name", func(r *Reading) { r.Links = append(r.Links, Link{RxBitsPerSecond: 1}) }, "links[1]: name missing"},
		{"link twice", func(r *Reading) { r.Links = append(r.Links, r.Links[0]) }, "link eth0: listed twice (links[0] and links[1])"},
		{"link with a strange name", func(r *Reading) { r.Links[0].Name, r.Links[0].TxBitsPerSecond = "eth0: ok\n", -1 }, `link "eth0: ok\n": tx_bps -1`},
		{"conntrack entries ten times the max", func(r *Reading) { r.ConntrackEntries, r.ConntrackMax = 1000, 100 }, "conntrack_entries 1000, 10 times"},
		{"conntrack entries over the max", func(r *Reading) { r.ConntrackEntries, r.ConntrackMax = 999, 100 }, ""},
		{"conntrack max beyond the kernel", func(r *Reading) { r.ConntrackMax = 1 << 33 }, "conntrack_max 8589934592"},
		{"conntrack drops wrapped", func(r *Reading) { r.ConntrackDrops = 1<<64 - 5 }, "conntrack_drops 18446744073709551611"},
		{"listen drops wrapped", func(r *Reading) { r.ListenDrops = 1<<64 - 5 }, "listen_drops 18446744073709551611"},
		{"listen drops many", func(r *Reading) { r.ListenDrops = 1e9 }, ""},
		{"load beyond any machine", func(r *Reading) { r.Load15 = 5e6 }, "load15 5e+06"},
		{"load of a hung NFS mount", func(r *Reading) { r.Load15 = 20000 }, ""},
		{"cpus beyond Linux", func(r *Reading) { r.CPUs = 1 << 20 }, "cpus 1048576"},
		{"memory NaN", func(r *Reading) { r.MemoryUsedPercent = math.NaN() }, "memory_used_percent NaN, want a finite figure"},
		{"memory negative", func(r *Reading) { r.MemoryUsedPercent = -1 }, "memory_used_percent -1"},
		{"memory missing, NaN", func(r *Reading) {
			r.MemoryUsedPercent, r.Missing = math.NaN(), []Input{InputMemory}
		}, "memory_used_percent NaN"},
		{"before 2000", func(r *Reading) { r.At = time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC) }, "at 1999-12-31T23:59:59Z, before 2000"},
		{"1970", func(r *Reading) { r.At = time.Unix(0, 0) }, "before 2000"},
		{"2000", func(r *Reading) { r.At = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) }, ""},
		{"year 2200", func(r *Reading) { r.At = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC) }, "at 2200-01-01T00:00:00Z, in 2200 or later"},
		{"year 10000", func(r *Reading) { r.At = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "in 2200 or later"},
		{"unknown missing", func(r *Reading) { r.Missing = []Input{"disk"} }, `missing lists "disk", not an input`},
		{"version 2 without run", func(r *Reading) { r.Version, r.Seq = 2, 1 }, "run missing with seq 1"},
		{"version 2 without seq", func(r *Reading) { r.Version, r.Run = 2, "abc" }, `seq 0 with run "abc"`},
		{"version 2 without run and seq", func(r *Reading) { r.Version = 2 }, ""},
		{"version 2", func(r *Reading) { r.Version, r.Run, r.Seq = 2, "0123456789abcdef0123456789abcdef", 1 }, ""},
		{"version 1 with run", func(r *Reading) { r.Run, r.Seq = "abc", 1 }, `run "abc" and seq 1 in version 1`},
		{"version 0 with run only", func(r *Reading) { r.Version, r.Run = 0, "abc" }, `seq 0 with run "abc"`},
		{"version 0 with run and seq", func(r *Reading) { r.Version, r.Run, r.Seq = 0, "abc", 9 }, ""},
		{"run with a space", func(r *Reading) { r.Version, r.Run, r.Seq = 2, "a b", 1 }, `run "a b", want`},
		{"run too long", func(r *Reading) { r.Version, r.Run, r.Seq = 2, strings.Repeat("a", 65), 1 }, `run "aaaa`},
		{"version 3", func(r *Reading) { r.Version = 3 }, "v 3, want 1 or 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := calm(t0)
			tt.edit(&r)
			err := r.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				tr := NewTracker("eu-01", Limits{})
				observe(t, tr, r)
				if _, err := json.Marshal(tr); err != nil {
					t.Fatalf("state of a valid reading: %v", err)
				}
				return
			}
			// The node, then each problem by its wire field (and a
			// link by its name) with the figure given.
			if !errors.Is(err, ErrInvalidReading) || !strings.HasPrefix(err.Error(), "invalid reading of node eu-01: ") ||
				!strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Validate = %v, want ErrInvalidReading of node eu-01 naming %s", err, tt.field)
			}
			tr := NewTracker("eu-01", Limits{})
			if _, err := tr.Observe(r); !errors.Is(err, ErrInvalidReading) {
				t.Fatalf("Observe = %v, want ErrInvalidReading", err)
			}
		})
	}
}

// TestValidateAt: a reading dated more than a day after the receiver's
// clock is refused; one an hour or fourteen ahead, or a week old, is not.
func TestValidateAt(t *testing.T) {
	now := t0
	for _, tt := range []struct {
		at time.Time
		ok bool
	}{
		{now.Add(time.Hour), true},
		{now.Add(14 * time.Hour), true},
		{now.Add(-7 * 24 * time.Hour), true},
		{now.Add(25 * time.Hour), false},
		{now.AddDate(1, 0, 0), false},
	} {
		err := calm(tt.at).ValidateAt(now)
		if (err == nil) != tt.ok || (err != nil && (!errors.Is(err, ErrInvalidReading) || !strings.Contains(err.Error(), "of node eu-01: at "))) {
			t.Errorf("reading at now%+v: ValidateAt = %v, want ok %v", tt.at.Sub(now), err, tt.ok)
		}
	}
	r := calm(now.Add(48 * time.Hour))
	r.MemoryUsedPercent = -1
	if err := r.ValidateAt(now); err == nil || !strings.Contains(err.Error(), "memory_used_percent -1") || !strings.Contains(err.Error(), "\nat ") ||
		strings.Count(err.Error(), "invalid reading") != 1 {
		t.Errorf("ValidateAt = %v, want both faults named", err)
	}
}

// TestOneBadNodeStateSaves: the reading once seen in the field (1e307 bit/s on a
// 1 Mbit/s link) is refused, and the node's state still marshals.
func TestOneBadNodeStateSaves(t *testing.T) {
	tr := NewTracker("eu-01", Limits{})
	observe(t, tr, hot(t0))
	s := strings.Replace(wire, `"rx_bps":870000000`, `"rx_bps":1e307`, 1)
	s = strings.Replace(s, `"speed_mbps":1000`, `"speed_mbps":1`, 1)
	var r Reading
	err := json.Unmarshal([]byte(s), &r)
	if !errors.Is(err, ErrInvalidReading) || !strings.Contains(err.Error(), "of node eu-01: link eth0: rx_bps 1e+307") {
		t.Fatalf("decode: %v, want ErrInvalidReading naming link eth0's rx_bps", err)
	}
	bad := calm(t0.Add(step))
	bad.Links[0] = Link{Name: "eth0", RxBitsPerSecond: 1e307, SpeedMbps: 1}
	if _, err := tr.Observe(bad); !errors.Is(err, ErrInvalidReading) {
		t.Fatalf("Observe: %v", err)
	}
	if _, err := json.Marshal(tr); err != nil {
		t.Fatalf("state after a refused reading: %v", err)
	}
}

// A reading's errors name its node as the operator wrote it, quoted only
// when it could be taken for other words, and nothing when it names none:
// the tracker's Observe then names the tracker's node.
func TestInvalidReadingNamesItsNode(t *testing.T) {
	for _, tt := range []struct{ node, want string }{
		{"eu-01", "invalid reading of node eu-01: memory_used_percent -1, want zero or more"},
		{"de-fra.1@dc:2", "invalid reading of node de-fra.1@dc:2: memory_used_percent -1"},
		{"eu 01: fine", `invalid reading of node "eu 01: fine": memory_used_percent -1`},
		{"", "invalid reading: memory_used_percent -1"},
	} {
		r := calm(t0)
		r.Node, r.MemoryUsedPercent = tt.node, -1
		if err := r.Validate(); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("node %q: Validate = %v, want %q", tt.node, err, tt.want)
		}
	}
	r := calm(t0)
	r.Node, r.MemoryUsedPercent = "", -1
	if _, err := NewTracker("eu-01", Limits{}).Observe(r); err == nil || !strings.Contains(err.Error(), `of node "eu-01"`) {
		t.Errorf("Observe of a reading naming no node = %v, want the tracker's node named", err)
	}
}
