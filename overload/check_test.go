package overload

import (
	"math"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// calm returns a valid version 1 reading in which no check passes.
func calm(at time.Time) Reading {
	return Reading{
		Version:           1,
		Node:              "eu-01",
		At:                at,
		MemoryUsedPercent: 40,
		Load15:            1.5,
		CPUs:              8,
		ConntrackEntries:  1000,
		ConntrackMax:      262144,
		Links:             []Link{{Name: "eth0", RxBitsPerSecond: 1e6, TxBitsPerSecond: 2e6, SpeedMbps: 1000}},
	}
}

// TestEvaluateLimits tries each check just below, at and just above its
// limit, with the default limits.
func TestEvaluateLimits(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*Reading)
		passes bool
		text   string
	}{
		{"memory below", func(r *Reading) { r.MemoryUsedPercent = 89.9 }, false, ""},
		{"memory at", func(r *Reading) { r.MemoryUsedPercent = 90 }, false, ""},
		{"memory just above", func(r *Reading) { r.MemoryUsedPercent = 90.4 }, true, "memory at 90.4 %"},
		{"memory barely above", func(r *Reading) { r.MemoryUsedPercent = 90.04 }, true, "memory at 90.04 %"},
		{"memory above", func(r *Reading) { r.MemoryUsedPercent = 92.4 }, true, "memory at 92 %"},
		{"memory full", func(r *Reading) { r.MemoryUsedPercent = 100 }, true, "memory at 100 %"},

		{"load below", func(r *Reading) { r.Load15 = 15.99 }, false, ""},
		{"load at", func(r *Reading) { r.Load15 = 16 }, false, ""},
		{"load just above", func(r *Reading) { r.Load15 = 16.01 }, true, "load average 16.01 over 15 minutes, above twice the 8 CPU cores"},
		{"load above", func(r *Reading) { r.Load15 = 17.3 }, true, "load average 17.3 over 15 minutes, above twice the 8 CPU cores"},
		{"load one core", func(r *Reading) { r.Load15, r.CPUs = 2.5, 1 }, true, "load average 2.5 over 15 minutes, above twice the 1 CPU core"},

		{"conntrack fill below", func(r *Reading) { r.ConntrackEntries, r.ConntrackMax = 79, 100 }, false, ""},
		{"conntrack fill at", func(r *Reading) { r.ConntrackEntries, r.ConntrackMax = 80, 100 }, true, "the connection table at 80 % (80 of 100)"},
		{"conntrack fill at, large table", func(r *Reading) { r.ConntrackEntries, r.ConntrackMax = 209716, 262144 }, true, "the connection table at 80 % (209716 of 262144)"},
		{"conntrack fill just below, large table", func(r *Reading) { r.ConntrackEntries, r.ConntrackMax = 209715, 262144 }, false, ""},
		{"conntrack fill above", func(r *Reading) { r.ConntrackEntries = 222822 }, true, "the connection table at 85 % (222822 of 262144)"},
		{"conntrack over its max", func(r *Reading) { r.ConntrackEntries, r.ConntrackMax = 101, 100 }, true, "the connection table at 101 % (101 of 100)"},

		{"conntrack drops none", func(r *Reading) { r.ConntrackDrops = 0 }, false, ""},
		{"conntrack drops one", func(r *Reading) { r.ConntrackDrops = 1 }, true, "the connection table was full: 1 connection dropped"},
		{"conntrack drops", func(r *Reading) { r.ConntrackDrops = 37 }, true, "the connection table was full: 37 connections dropped"},

		{"listen drops below", func(r *Reading) { r.ListenDrops = 9 }, false, ""},
		{"listen drops at", func(r *Reading) { r.ListenDrops = 10 }, true, "listen queues were full: 10 connections dropped"},
		{"listen drops above", func(r *Reading) { r.ListenDrops = 14 }, true, "listen queues were full: 14 connections dropped"},

		{"bandwidth below", func(r *Reading) { r.Links[0].TxBitsPerSecond = 799e6 }, false, ""},
		{"bandwidth at", func(r *Reading) { r.Links[0].TxBitsPerSecond = 800e6 }, false, ""},
		{"bandwidth just above", func(r *Reading) { r.Links[0].RxBitsPerSecond = 801e6 }, true, "bandwidth at 801 Mbit/s, 80.1 % of the 1 Gbit/s link eth0"},
		{"bandwidth above, receive", func(r *Reading) { r.Links[0].RxBitsPerSecond = 870e6 }, true, "bandwidth at 870 Mbit/s, 87 % of the 1 Gbit/s link eth0"},
		{"bandwidth above, transmit", func(r *Reading) { r.Links[0].TxBitsPerSecond = 870e6 }, true, "bandwidth at 870 Mbit/s, 87 % of the 1 Gbit/s link eth0"},
		{"bandwidth, 10 Gbit/s", func(r *Reading) {
			r.Links = append(r.Links, Link{Name: "eth1", TxBitsPerSecond: 9.54e9, SpeedMbps: 10000})
		}, true, "bandwidth at 9.5 Gbit/s, 95 % of the 10 Gbit/s link eth1"},
		{"bandwidth, busiest link named", func(r *Reading) {
			r.Links = []Link{
				{Name: "eth0", RxBitsPerSecond: 85e6, SpeedMbps: 100},
				{Name: "eth1", RxBitsPerSecond: 2.4e9, SpeedMbps: 2500},
				{Name: "eth2", RxBitsPerSecond: 9e9, SpeedMbps: 10000},
			}
		}, true, "bandwidth at 2.4 Gbit/s, 96 % of the 2.5 Gbit/s link eth1"},
		{"bandwidth, 100 Mbit/s", func(r *Reading) { r.Links[0] = Link{Name: "eth0", TxBitsPerSecond: 85e6, SpeedMbps: 100} }, true,
			"bandwidth at 85 Mbit/s, 85 % of the 100 Mbit/s link eth0"},
		{"bandwidth, speed unknown", func(r *Reading) { r.Links[0] = Link{Name: "eth0", TxBitsPerSecond: 85e9} }, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := calm(t0)
			tt.edit(&r)
			if err := r.Validate(); err != nil {
				t.Fatalf("test reading is invalid: %v", err)
			}
			fs := Evaluate(r, Limits{})
			if !tt.passes {
				if len(fs) != 0 {
					t.Fatalf("Evaluate = %+v, want no check passed", fs)
				}
				return
			}
			if len(fs) != 1 {
				t.Fatalf("Evaluate = %+v, want one check passed", fs)
			}
			if fs[0].Text != tt.text {
				t.Errorf("text = %q\n          want %q", fs[0].Text, tt.text)
			}
			if !fs[0].At.Equal(r.At) {
				t.Errorf("finding at %v, want the reading's %v", fs[0].At, r.At)
			}
		})
	}
}

// TestEvaluateMissing: a check whose input is missing does not pass,
// whatever the figure says.
func TestEvaluateMissing(t *testing.T) {
	r := calm(t0)
	r.MemoryUsedPercent, r.Load15, r.ConntrackEntries, r.ConntrackDrops, r.ListenDrops = 99, 99, 262144, 5, 50
	r.Links[0].RxBitsPerSecond = 999e6
	if got := len(Evaluate(r, Limits{})); got != numChecks {
		t.Fatalf("with nothing missing %d checks pass, want all %d", got, numChecks)
	}
	r.Missing = []Input{InputMemory, InputLoad, InputConntrack, InputConntrackDrops, InputListenDrops, InputBandwidth}
	if fs := Evaluate(r, Limits{}); len(fs) != 0 {
		t.Fatalf("with every input missing Evaluate = %+v, want nothing", fs)
	}
	r.Missing = []Input{InputConntrack}
	for _, f := range Evaluate(r, Limits{}) {
		if f.Check == CheckConntrackFill {
			t.Fatalf("conntrack fill passed with conntrack missing")
		}
	}
}

// TestEvaluateOrderAndLimits: findings come in notice order; limits other
// than the defaults are used and worded.
func TestEvaluateOrderAndLimits(t *testing.T) {
	r := calm(t0)
	r.ListenDrops, r.MemoryUsedPercent, r.Load15 = 3, 96, 13
	l := Limits{MemoryPercent: 95, LoadPerCPU: 1.5, ListenDrops: 3, ConntrackDrops: 4}
	fs := Evaluate(r, l)
	var got []Check
	for _, f := range fs {
		got = append(got, f.Check)
	}
	want := []Check{CheckMemory, CheckLoad, CheckListenQueue}
	if len(got) != len(want) {
		t.Fatalf("checks %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("checks %v, want %v", got, want)
		}
	}
	if w := "load average 13.0 over 15 minutes, above 1.5 times the 8 CPU cores"; fs[1].Text != w {
		t.Errorf("load text %q, want %q", fs[1].Text, w)
	}
	if fs[1].Limit != 12 || fs[1].Value != 13 {
		t.Errorf("load figures %v against %v, want 13 against 12", fs[1].Value, fs[1].Limit)
	}
	r.ConntrackDrops = 4
	for _, f := range Evaluate(r, l) {
		if f.Check == CheckConntrackDrops {
			t.Errorf("4 conntrack drops passed a limit of more than 4")
		}
	}
}

func TestFormat(t *testing.T) {
	speeds := map[uint64]string{10: "10 Mbit/s", 100: "100 Mbit/s", 1000: "1 Gbit/s", 2500: "2.5 Gbit/s", 10000: "10 Gbit/s", 25000: "25 Gbit/s", 100000: "100 Gbit/s"}
	for in, want := range speeds {
		if got := formatSpeed(in); got != want {
			t.Errorf("formatSpeed(%d) = %q, want %q", in, got, want)
		}
	}
	rates := map[float64]string{870e6: "870 Mbit/s", 870.4e6: "870 Mbit/s", 8.66e9: "8.7 Gbit/s", 1e9: "1 Gbit/s", 950e3: "950 kbit/s", 12: "12 bit/s", 0: "0 bit/s"}
	for in, want := range rates {
		if got := formatRate(in); got != want {
			t.Errorf("formatRate(%v) = %q, want %q", in, got, want)
		}
	}
	above := []struct {
		v, limit float64
		dec      int
		strict   bool
		want     string
	}{
		{92.7, 90, 0, true, "93"},
		{92.4, 90, 0, true, "92"},
		{90.6, 90, 0, true, "91"},
		{90.4, 90, 0, true, "90.4"},
		{90.04, 90, 0, true, "90.04"},
		{90.004, 90, 0, true, "90.004"},
		{80, 80, 0, false, "80"},
		{84.99984741, 80, 0, false, "85"},
		{100 * (1 - 0.08), 90, 0, true, "92"}, // 91.99999999999999 in float
		{17.3, 16, 1, true, "17.3"},
		{16.04, 16, 1, true, "16.04"},
	}
	for _, a := range above {
		if got := formatAbove(a.v, a.limit, a.dec, a.strict); got != a.want {
			t.Errorf("formatAbove(%v, %v) = %q, want %q", a.v, a.limit, got, a.want)
		}
	}
	if got := formatAbove(math.Nextafter(90, 91), 90, 0, true); got == "90" || got == "90.00" {
		t.Errorf("formatAbove just above 90 = %q, reads as the limit", got)
	}
}

// TestCheckTable: the table names each check once, in the order of
// Checks, each reading an input no other check reads, with both its
// functions; every input constant is read by a check.
func TestCheckTable(t *testing.T) {
	want := []Check{CheckMemory, CheckLoad, CheckConntrackFill, CheckConntrackDrops, CheckListenQueue, CheckBandwidth}
	got := Checks()
	if len(got) != len(want) || numChecks != len(want) {
		t.Fatalf("Checks() = %v, want %v", got, want)
	}
	inputs := map[Input]Check{}
	for i, d := range checkTable {
		if got[i] != want[i] || d.check.index() != i {
			t.Errorf("check %d is %q, want %q", i, got[i], want[i])
		}
		if d.invalid == nil || d.evaluate == nil || d.input == "" {
			t.Errorf("check %q: incomplete entry", d.check)
		}
		if c, ok := inputs[d.input]; ok {
			t.Errorf("input %q read by %q and %q", d.input, c, d.check)
		}
		inputs[d.input] = d.check
	}
	for _, in := range []Input{InputMemory, InputLoad, InputConntrack, InputConntrackDrops, InputListenDrops, InputBandwidth} {
		if !in.known() {
			t.Errorf("input %q: no check reads it", in)
		}
	}
	if Input("disk").known() || Check("disk").index() >= 0 {
		t.Errorf("an unknown input or check is known")
	}
}

// TestCheckDescribe: every check reads a known input and words its
// figure and limit, with and without a reading; the page's wording.
func TestCheckDescribe(t *testing.T) {
	r := calm(t0)
	r.MemoryUsedPercent, r.Load15, r.CPUs = 95, 17.3, 8
	r.ConntrackEntries, r.ConntrackMax, r.ConntrackDrops, r.ListenDrops = 222822, 262144, 37, 14
	r.Links = []Link{{Name: "eth1", SpeedMbps: 0, RxBitsPerSecond: 9e9},
		{Name: "eth0", SpeedMbps: 1000, RxBitsPerSecond: 300e6, TxBitsPerSecond: 10e6}}
	want := map[Check][3]string{ // figure, limit, limit without a reading
		CheckMemory:         {"95.0 %", "above 90 %", "above 90 %"},
		CheckLoad:           {"17.30 on 8 CPUs", "above 16 (2 × 8 CPUs)", "above 2 × CPUs"},
		CheckConntrackFill:  {"85.0 % (222822 of 262144)", "80 % or more", "80 % or more"},
		CheckConntrackDrops: {"37 dropped", "more than 0 dropped", "more than 0 dropped"},
		CheckListenQueue:    {"14 dropped", "10 or more dropped", "10 or more dropped"},
		CheckBandwidth:      {"30.0 % on eth0", "above 80 % of a link", "above 80 % of a link"},
	}
	for _, c := range Checks() {
		if !c.Input().known() {
			t.Errorf("%s reads input %q, which no check lists", c, c.Input())
		}
		fig, limit := c.Describe(&r, Limits{})
		_, none := c.Describe(nil, Limits{})
		if w := want[c]; fig != w[0] || limit != w[1] || none != w[2] {
			t.Errorf("%s: Describe = %q, %q; without a reading %q; want %q", c, fig, limit, none, w)
		}
	}
	if c := Check("disk"); c.Input() != "" {
		t.Errorf("unknown check's input %q", c.Input())
	}
	if fig, limit := Check("disk").Describe(&r, Limits{}); fig != "" || limit != "" {
		t.Errorf("unknown check's Describe = %q, %q", fig, limit)
	}
	r.Links = []Link{{Name: "lo"}}
	if fig, _ := CheckBandwidth.Describe(&r, Limits{}); fig != "no link with a known speed" {
		t.Errorf("bandwidth without a known speed: %q", fig)
	}
	if _, limit := CheckMemory.Describe(&r, Limits{MemoryPercent: 95}); limit != "above 95 %" {
		t.Errorf("memory limit with MemoryPercent 95: %q", limit)
	}
}

func TestBusiestLink(t *testing.T) {
	tests := []struct {
		links []Link
		want  float64
		name  string
		ok    bool
	}{
		{nil, math.NaN(), "", false},
		{[]Link{{Name: "ifb0", RxBitsPerSecond: 1e9}}, math.NaN(), "", false},
		{[]Link{{Name: "a", SpeedMbps: 100, TxBitsPerSecond: 50e6}, {Name: "b", SpeedMbps: 1000, RxBitsPerSecond: 900e6}}, 90, "b", true},
		{[]Link{{Name: "a", SpeedMbps: 100, TxBitsPerSecond: 50e6}, {Name: "b", SpeedMbps: 1000, RxBitsPerSecond: 500e6}}, 50, "a", true},
	}
	for _, tt := range tests {
		got, name, ok := BusiestLink(tt.links)
		if ok != tt.ok || name != tt.name || (ok && math.Abs(got-tt.want) > 1e-9) || (!ok && !math.IsNaN(got)) {
			t.Errorf("BusiestLink(%v) = %v, %q, %v; want %v, %q, %v", tt.links, got, name, ok, tt.want, tt.name, tt.ok)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	got := Limits{MemoryPercent: 95, Window: 2}.WithDefaults()
	d := DefaultLimits()
	if got.MemoryPercent != 95 || got.Window != 2 || got.Need != 2 || got.LoadPerCPU != d.LoadPerCPU || got.NoticeEvery != d.NoticeEvery {
		t.Errorf("WithDefaults = %+v", got)
	}
}

// Texts lists each finding's text in order, and nothing for none.
func TestTexts(t *testing.T) {
	fs := []Finding{{Check: CheckMemory, Text: "memory at 92 %"}, {Check: CheckConntrackDrops, Text: "the connection table was full: 37 connections dropped"}}
	if got := Texts(fs); !slices.Equal(got, []string{"memory at 92 %", "the connection table was full: 37 connections dropped"}) {
		t.Errorf("Texts = %q", got)
	}
	if got := Texts(nil); got != nil {
		t.Errorf("Texts(nil) = %q, want nil", got)
	}
}
