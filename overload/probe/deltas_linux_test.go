package probe

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/overload"
)

// fixtureRoot copies testdata/proc into a temporary directory the test may
// change between readings.
func fixtureRoot(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS("testdata/proc")); err != nil {
		t.Fatal(err)
	}
	// CopyFS copies the symlink thread-self as a directory: make it a link
	// to the one thread again.
	if err := os.RemoveAll(filepath.Join(dst, "thread-self")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("1/task/1", filepath.Join(dst, "thread-self")); err != nil {
		t.Fatal(err)
	}
	return dst
}

// setListenDrops rewrites root's netstat with ListenDrops at v.
func setListenDrops(t *testing.T, root string, v uint64) {
	t.Helper()
	path := filepath.Join(root, "1", "task", "1", "net", "netstat")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	names := strings.Fields(lines[0])
	values := strings.Fields(lines[1])
	for i, n := range names {
		if n == "ListenDrops" {
			values[i] = strconv.FormatUint(v, 10)
		}
	}
	lines[1] = strings.Join(values, " ")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadDeltas: counters become deltas between readings; a counter that
// went back, or a reboot, gives no delta (never a huge or negative one).
func TestReadDeltas(t *testing.T) {
	root := fixtureRoot(t)
	p := newProbe(t, Config{ProcRoot: root})
	bootID := filepath.Join(root, "sys", "kernel", "random", "boot_id")

	steps := []struct {
		name      string
		change    func()
		wantDrops uint64
		missing   bool
		note      string
	}{
		{name: "first", change: func() { setListenDrops(t, root, 100) }, missing: true, note: noteFirst},
		{name: "growth", change: func() { setListenDrops(t, root, 137) }, wantDrops: 37},
		{name: "still", change: func() {}, wantDrops: 0},
		{name: "went back", change: func() { setListenDrops(t, root, 5) }, missing: true, note: "went back"},
		{name: "growth after reset", change: func() { setListenDrops(t, root, 15) }, wantDrops: 10},
		{name: "reboot", change: func() {
			writeFile(t, bootID, "0c1d3d4e-0000-4000-8000-000000000000\n")
			setListenDrops(t, root, 1<<40)
		}, missing: true, note: "rebooted"},
		{name: "after reboot", change: func() { setListenDrops(t, root, 1<<40+3) }, wantDrops: 3},
	}
	for _, s := range steps {
		s.change()
		r := read(t, p)
		if got := slices.Contains(r.Missing, overload.InputListenDrops); got != s.missing {
			t.Fatalf("%s: listen_drops missing = %v, want %v (notes %q)", s.name, got, s.missing, r.Notes)
		}
		if r.ListenDrops != s.wantDrops {
			t.Fatalf("%s: listen drops %d, want %d", s.name, r.ListenDrops, s.wantDrops)
		}
		if s.note != "" && len(notesWith(r.Notes, s.note)) == 0 {
			t.Fatalf("%s: notes %q lack %q", s.name, r.Notes, s.note)
		}
		if r.ConntrackEntries != 222822 || r.ConntrackMax != 262144 {
			t.Fatalf("%s: conntrack %d of %d from the fixture", s.name, r.ConntrackEntries, r.ConntrackMax)
		}
	}
}

// TestReadDegrades: a source that cannot be read makes its input missing
// with a note; the rest of the reading stands.
func TestReadDegrades(t *testing.T) {
	tests := []struct {
		name    string
		change  func(root string)
		missing []overload.Input
		note    string
		maybe   []overload.Input // missing or not, depending on the machine
	}{
		{name: "no MemAvailable", change: func(root string) {
			writeFile(t, filepath.Join(root, "meminfo"), "MemTotal: 1000 kB\nMemFree: 10 kB\n")
		}, missing: []overload.Input{overload.InputMemory}, note: "MemAvailable"},
		{name: "loadavg garbage", change: func(root string) {
			writeFile(t, filepath.Join(root, "loadavg"), "x y z\n")
		}, missing: []overload.Input{overload.InputLoad}, note: "load"},
		{name: "no conntrack module", change: func(root string) {
			os.RemoveAll(filepath.Join(root, "sys", "net", "netfilter"))
		}, missing: []overload.Input{overload.InputConntrack, overload.InputConntrackDrops}, note: "no conntrack"},
		{name: "conntrack max zero", change: func(root string) {
			writeFile(t, filepath.Join(root, "sys", "net", "netfilter", "nf_conntrack_max"), "0\n")
		}, missing: []overload.Input{overload.InputConntrack, overload.InputConntrackDrops}, note: "nf_conntrack_max is 0"},
		{name: "no thread-self", change: func(root string) {
			os.Remove(filepath.Join(root, "thread-self"))
		}, missing: []overload.Input{overload.InputListenDrops}, note: "this thread's proc entry",
			// Without CAP_NET_ADMIN drops come from the thread's net files.
			maybe: []overload.Input{overload.InputConntrackDrops}},
		{name: "netstat garbage", change: func(root string) {
			writeFile(t, filepath.Join(root, "1", "task", "1", "net", "netstat"), "TcpExt: A B\nTcpExt: 1\n")
		}, missing: []overload.Input{overload.InputListenDrops}, note: "listen drops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixtureRoot(t)
			tt.change(root)
			p := newProbe(t, Config{ProcRoot: root})
			read(t, p)
			r := read(t, p)
			for _, in := range tt.missing {
				if !slices.Contains(r.Missing, in) {
					t.Errorf("%s not missing: %v (notes %q)", in, r.Missing, r.Notes)
				}
			}
			if len(notesWith(r.Notes, tt.note)) == 0 {
				t.Errorf("notes %q lack %q", r.Notes, tt.note)
			}
			for _, in := range r.Missing {
				// Bandwidth depends on the machine's links.
				if !slices.Contains(tt.missing, in) && !slices.Contains(tt.maybe, in) && in != overload.InputBandwidth {
					t.Errorf("%s missing too: %v (notes %q), want only %v", in, r.Missing, r.Notes, tt.missing)
				}
			}
		})
	}
}

// TestDeltas: the pure step from two samples to a reading, on its own.
func TestDeltas(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	up := uint32(unix.IFF_UP | unix.IFF_RUNNING)
	// base is a sample with every source read; change edits a copy.
	base := func(at time.Duration, change func(s *sample)) *sample {
		s := &sample{
			mono: t0.Add(at), bootID: "boot-1", netnsID: "net:[1]",
			memory: 40, load15: 1.5, cpus: 4,
			ctCount: 10, ctMax: 100,
			ctDrops: map[int]uint64{0: 5, 1: 7}, ctDropsSource: "ctnetlink",
			listenDrops: 100,
			links:       []linkSample{{name: "eth0", index: 2, flags: up, rxBytes: 1000, txBytes: 2000, speedMbps: 1000}},
		}
		if change != nil {
			change(s)
		}
		return s
	}
	netInputs := []overload.Input{overload.InputConntrackDrops, overload.InputListenDrops, overload.InputBandwidth}
	tests := []struct {
		name      string
		prev, cur *sample
		missing   []overload.Input
		note      string
		check     func(t *testing.T, r overload.Reading)
	}{
		{name: "first reading", cur: base(0, nil), missing: netInputs, note: noteFirst,
			check: func(t *testing.T, r overload.Reading) {
				if r.MemoryUsedPercent != 40 || r.Load15 != 1.5 || r.CPUs != 4 || r.ConntrackEntries != 10 || r.ConntrackMax != 100 {
					t.Errorf("values of a first reading: %+v", r)
				}
				if len(r.Links) != 0 || r.ListenDrops != 0 || r.ConntrackDrops != 0 {
					t.Errorf("deltas in a first reading: %+v", r)
				}
			}},
		{name: "growth", prev: base(0, nil), cur: base(10*time.Second, func(s *sample) {
			s.listenDrops, s.ctDrops[1] = 137, 10
			s.links[0].rxBytes, s.links[0].txBytes = 1000+1250, 2000+2500
		}), check: func(t *testing.T, r overload.Reading) {
			if r.ListenDrops != 37 || r.ConntrackDrops != 3 {
				t.Errorf("listen drops %d, conntrack drops %d; want 37, 3", r.ListenDrops, r.ConntrackDrops)
			}
			want := []overload.Link{{Name: "eth0", RxBitsPerSecond: 1000, TxBitsPerSecond: 2000, SpeedMbps: 1000}}
			if !slices.Equal(r.Links, want) {
				t.Errorf("links %+v, want %+v", r.Links, want)
			}
			if len(r.Notes) != 0 {
				t.Errorf("notes %q, want none", r.Notes)
			}
		}},
		{name: "listen drops went back", prev: base(0, nil), cur: base(time.Second, func(s *sample) { s.listenDrops = 5 }),
			missing: []overload.Input{overload.InputListenDrops}, note: "ListenDrops went back"},
		{name: "a per-CPU drop counter went back", prev: base(0, nil), cur: base(time.Second, func(s *sample) { s.ctDrops[0] = 1 }),
			missing: []overload.Input{overload.InputConntrackDrops}, note: "per-CPU counter went back"},
		{name: "a CPU came online", prev: base(0, nil), cur: base(time.Second, func(s *sample) { s.ctDrops[2] = 0 }),
			missing: []overload.Input{overload.InputConntrackDrops}, note: "per-CPU counter went back"},
		{name: "drops from another source", prev: base(0, nil), cur: base(time.Second, func(s *sample) {
			s.ctDropsSource, s.ctDropsNote = "procfs", "conntrack drops read from /proc/net/stat/nf_conntrack: no CAP_NET_ADMIN"
		}), missing: []overload.Input{overload.InputConntrackDrops}, note: "no previous count from procfs"},
		{name: "link byte counters went back", prev: base(0, nil), cur: base(time.Second, func(s *sample) { s.links[0].rxBytes = 1 }),
			missing: []overload.Input{overload.InputBandwidth}, note: "link eth0: byte counters went back"},
		{name: "reboot", prev: base(0, nil), cur: base(time.Second, func(s *sample) { s.bootID, s.listenDrops = "boot-2", 3 }),
			missing: netInputs, note: "rebooted",
			check: func(t *testing.T, r overload.Reading) {
				if slices.Contains(r.Notes, noteFirst) {
					t.Errorf("a reading after a reboot says it is the first: %q", r.Notes)
				}
			}},
		{name: "namespace replaced", prev: base(0, nil), cur: base(time.Second, func(s *sample) { s.netnsID = "net:[2]" }),
			missing: netInputs, note: "network namespace was replaced"},
		{name: "new link", prev: base(0, nil), cur: base(time.Second, func(s *sample) {
			s.links = append(s.links, linkSample{name: "eth1", index: 3, flags: up, rxBytes: 1 << 40, speedMbps: 1000})
		}), note: "link eth1: new since the previous reading",
			check: func(t *testing.T, r overload.Reading) {
				if len(r.Links) != 1 || r.Links[0].Name != "eth0" {
					t.Errorf("links %+v, want eth0 only", r.Links)
				}
			}},
		{name: "link replaced", prev: base(0, nil), cur: base(time.Second, func(s *sample) { s.links[0].index = 9 }),
			missing: []overload.Input{overload.InputBandwidth}, note: "link eth0: replaced since the previous reading (index 9, was 2)"},
		{name: "speed unknown", prev: base(0, nil), cur: base(time.Second, func(s *sample) {
			s.links[0].speedMbps, s.links[0].speedWhy = 0, "the kernel does not know it (speed -1)"
		}), missing: []overload.Input{overload.InputBandwidth}, note: "link eth0: speed unknown, the kernel does not know it (speed -1); its bandwidth check is skipped (an operator can give it in LinkSpeedMbps)"},
		{name: "speed unknown, the caller's hint", prev: base(0, nil), cur: base(time.Second, func(s *sample) {
			s.links[0].speedMbps, s.links[0].speedWhy = 0, "no speed in sysfs"
			s.speedHint = "give it with -link-speed"
		}), missing: []overload.Input{overload.InputBandwidth}, note: "link eth0: speed unknown, no speed in sysfs; its bandwidth check is skipped (give it with -link-speed)"},
		{name: "no link up", prev: base(0, nil), cur: base(time.Second, func(s *sample) { s.links = nil }),
			missing: []overload.Input{overload.InputBandwidth}, note: "no link is up besides loopback"},
		{name: "links unreadable before", prev: base(0, func(s *sample) { s.links, s.linksErr = nil, errNoAnswer }), cur: base(time.Second, nil),
			missing: []overload.Input{overload.InputBandwidth}, note: "link eth0: new since the previous reading"},
		{name: "listen drops unreadable before", prev: base(0, func(s *sample) { s.listenErr = errMalformed }), cur: base(time.Second, nil),
			missing: []overload.Input{overload.InputListenDrops}, note: "listen drops: no previous count"},
		{name: "no conntrack", prev: base(0, nil), cur: base(time.Second, func(s *sample) { s.ctErr, s.ctDrops = errMalformed, nil }),
			missing: []overload.Input{overload.InputConntrack, overload.InputConntrackDrops}, note: "conntrack: malformed"},
		{name: "namespace not entered", prev: base(0, nil), cur: &sample{mono: t0.Add(time.Second), memory: 40, load15: 1, cpus: 4,
			netErr: errors.New("network namespace /x: enter: operation not permitted")},
			missing: []overload.Input{overload.InputConntrack, overload.InputConntrackDrops, overload.InputListenDrops, overload.InputBandwidth},
			note:    "network namespace /x: enter",
			check: func(t *testing.T, r overload.Reading) {
				if r.MemoryUsedPercent != 40 || slices.Contains(r.Notes, noteFirst) {
					t.Errorf("reading without the namespace: %+v", r)
				}
			}},
		{name: "memory and load unreadable", cur: base(0, func(s *sample) { s.memoryErr, s.loadErr = errMalformed, errMalformed }),
			missing: append([]overload.Input{overload.InputMemory, overload.InputLoad}, netInputs...), note: "memory: malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, moved := deltas(tt.prev, tt.cur)
			got := slices.Clone(r.Missing)
			want := slices.Clone(tt.missing)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("missing %v, want %v (notes %q)", r.Missing, tt.missing, r.Notes)
			}
			if tt.note != "" && len(notesWith(r.Notes, tt.note)) == 0 {
				t.Errorf("notes %q lack %q", r.Notes, tt.note)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
			// The bytes: one count per link with a rate, its counters'
			// growth, never a rate times a time.
			if len(moved) != len(r.Links) {
				t.Fatalf("bytes of %d links, rates of %d", len(moved), len(r.Links))
			}
			for i, b := range moved {
				pl, cl := findLink(tt.prev, b.Name), findLink(tt.cur, b.Name)
				if b.Name != r.Links[i].Name || b.RxBytes != cl.rxBytes-pl.rxBytes || b.TxBytes != cl.txBytes-pl.txBytes {
					t.Errorf("bytes %+v; counters went from %d/%d to %d/%d", b, pl.rxBytes, pl.txBytes, cl.rxBytes, cl.txBytes)
				}
			}
			if tt.name == "growth" && (len(moved) != 1 || moved[0] != LinkBytes{Name: "eth0", RxBytes: 1250, TxBytes: 2500}) {
				t.Errorf("bytes %+v, want eth0 1250 received, 2500 sent", moved)
			}
		})
	}
}

func findLink(s *sample, name string) linkSample {
	for _, l := range s.links {
		if l.name == name {
			return l
		}
	}
	return linkSample{}
}

// TestSourcesOnePerInput: every input the overload checks read has one
// source, and no input two. A new input in overload fails here until it
// has its entry in sources.
func TestSourcesOnePerInput(t *testing.T) {
	want := []overload.Input{overload.InputMemory, overload.InputLoad, overload.InputConntrack,
		overload.InputConntrackDrops, overload.InputListenDrops, overload.InputBandwidth}
	seen := map[overload.Input]int{}
	for _, src := range sources {
		seen[src.input]++
		if src.read == nil || src.fill == nil {
			t.Errorf("source of %s: read or fill missing", src.input)
		}
	}
	for _, in := range want {
		if seen[in] != 1 {
			t.Errorf("input %s has %d sources, want 1", in, seen[in])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("sources for %d inputs, want %d: %v", len(seen), len(want), seen)
	}
	// A reading from samples that found nothing lists exactly the
	// sources' inputs as missing.
	r, _ := deltas(nil, &sample{memoryErr: errMalformed, loadErr: errMalformed, ctErr: errMalformed, listenErr: errMalformed, linksErr: errMalformed})
	got := slices.Clone(r.Missing)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("a reading that found nothing misses %v, want %v", r.Missing, want)
	}
}

// TestDeltasLinkNamesNotUTF8: the kernel takes any bytes but /, : and
// white space in a link's name. Two links named v\xff and v\xfe went out
// as the same "v\ufffd" in the reading's JSON (a reading the platform
// refuses for a link listed twice), and such a name as a metric label
// crashed the agent. The reading names them with the bytes escaped.
func TestDeltasLinkNamesNotUTF8(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	up := uint32(unix.IFF_UP | unix.IFF_RUNNING)
	s := func(at time.Duration, rx uint64) *sample {
		return &sample{
			mono: t0.Add(at), bootID: "b", netnsID: "n", memory: 40, load15: 1, cpus: 2, ctMax: 100,
			links: []linkSample{
				{name: "v\xff", index: 2, flags: up, rxBytes: rx, speedMbps: 1000},
				{name: "v\xfe", index: 3, flags: up, rxBytes: rx, speedMbps: 1000},
				{name: "vé0", index: 4, flags: up, rxBytes: rx, speedMbps: 1000},
			},
		}
	}
	r, moved := deltas(s(0, 0), s(time.Second, 1000))
	r.Version, r.Node, r.At = overload.ReadingVersion, "n1", t0.Add(time.Second)
	var names []string
	for _, l := range r.Links {
		names = append(names, l.Name)
	}
	if want := []string{`v\xff`, `v\xfe`, "vé0"}; !slices.Equal(names, want) {
		t.Errorf("link names %q, want %q", names, want)
	}
	for _, b := range moved {
		if !utf8.ValidString(b.Name) {
			t.Errorf("link bytes named %q, not UTF-8", b.Name)
		}
	}
	if err := r.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}
