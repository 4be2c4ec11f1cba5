//go:build linux

package sysctl

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// The fake trees are sized for this machine: 8 GiB, 4 CPUs.
const (
	testMem  = 8 << 30
	testCPUs = 4
)

// copyTree copies a testdata /proc/sys tree into a temporary directory's
// sys/, so Apply may write to it, and returns that sys/; its parent is the
// tree's ProcRoot (see procOf).
func copyTree(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "sys")
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("testdata", "procsys", name))); err != nil {
		t.Fatalf("copying testdata tree %s: %v", name, err)
	}
	return dst
}

// procOf returns the ProcRoot of a tree from copyTree.
func procOf(sysTree string) string { return filepath.Dir(sysTree) }

// snapshot returns every file under root with its content.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		m[strings.TrimPrefix(p, root)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func readKey(t *testing.T, root, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, strings.ReplaceAll(key, ".", "/")))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// brief is a KeyResult without its Reason, which tests check apart.
type brief struct {
	Key, Found, Target string
	Action             Action
}

func briefs(keys []KeyResult) []brief {
	out := make([]brief, len(keys))
	for i, k := range keys {
		out[i] = brief{k.Key, k.Found, k.Target, k.Action}
	}
	return out
}

func TestApplyRaisesKernelDefaults(t *testing.T) {
	root := copyTree(t, "defaults")
	dir := t.TempDir()
	// A file left by an earlier start, when the host was read-only.
	stale := filepath.Join(dir, FileName)
	if err := os.WriteFile(stale, []byte("net.core.somaxconn = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, root)

	plan, err := Plan(Config{ProcRoot: procOf(root), Dir: dir, MemBytes: testMem, CPUs: testCPUs})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, snapshot(t, root)); diff != "" {
		t.Fatalf("Plan changed the tree (-before +after):\n%s", diff)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("Plan touched the fallback file: %v", err)
	}
	if plan.File != "" {
		t.Errorf("Plan reports file %q, want none", plan.File)
	}

	rep, err := Apply(Config{ProcRoot: procOf(root), Dir: dir, MemBytes: testMem, CPUs: testCPUs})
	if err != nil {
		t.Fatal(err)
	}
	want := []brief{
		{KeyConntrackMax, "262144", "524288", Raised},
		{KeyConntrackBuckets, "262144", "524288", Raised},
		{KeySomaxconn, "4096", "32768", Raised},
		{KeyTCPMaxSynBacklog, "1024", "32768", Raised},
		{KeyNetdevMaxBacklog, "1000", "10240", Raised},
		{KeyRmemMax, "212992", "33554432", Raised},
		{KeyWmemMax, "212992", "33554432", Raised},
		{KeyTCPRmem, "4096 131072 6291456", "4096 131072 33554432", Raised},
		{KeyTCPWmem, "4096 16384 4194304", "4096 16384 33554432", Raised},
	}
	if diff := cmp.Diff(want, briefs(rep.Keys)); diff != "" {
		t.Errorf("Apply (-want +got):\n%s", diff)
	}
	wantPlan := make([]brief, len(want))
	for i, w := range want {
		w.Action = WouldRaise
		wantPlan[i] = w
	}
	if diff := cmp.Diff(wantPlan, briefs(plan.Keys)); diff != "" {
		t.Errorf("Plan (-want +got):\n%s", diff)
	}
	for _, w := range want {
		if got := readKey(t, root, w.Key); got != w.Target+"\n" {
			t.Errorf("%s holds %q after Apply, want %q", w.Key, got, w.Target+"\n")
		}
	}
	// Only its own keys are written.
	after := snapshot(t, root)
	for _, other := range []string{"/net/netfilter/nf_conntrack_count", "/net/core/optmem_max"} {
		if after[other] != before[other] {
			t.Errorf("%s changed from %q to %q: not a key of this package", other, before[other], after[other])
		}
	}
	if rep.File != "" {
		t.Errorf("Apply wrote %q with nothing left to set", rep.File)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the stale %s was not removed: %v", FileName, err)
	}
}

func TestApplyKeepsHigherValues(t *testing.T) {
	root := copyTree(t, "tuned")
	before := snapshot(t, root)
	rep, err := Apply(Config{ProcRoot: procOf(root), Dir: t.TempDir(), MemBytes: testMem, CPUs: testCPUs})
	if err != nil {
		t.Fatal(err)
	}
	want := []brief{
		{KeyConntrackMax, "2097152", "524288", AlreadyHigher},
		{KeyConntrackBuckets, "2097152", "524288", AlreadyHigher},
		{KeySomaxconn, "65535", "32768", AlreadyHigher},
		{KeyTCPMaxSynBacklog, "65535", "32768", AlreadyHigher},
		{KeyNetdevMaxBacklog, "250000", "10240", AlreadyHigher},
		{KeyRmemMax, "134217728", "33554432", AlreadyHigher},
		{KeyWmemMax, "134217728", "33554432", AlreadyHigher},
		// Multi-value: fields found, the max field at its target.
		{KeyTCPRmem, "4096 87380 134217728", "4096 87380 33554432", AlreadyHigher},
		{KeyTCPWmem, "4096 65536 134217728", "4096 65536 33554432", AlreadyHigher},
	}
	if diff := cmp.Diff(want, briefs(rep.Keys)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, snapshot(t, root)); diff != "" {
		t.Errorf("Apply lowered or rewrote values (-before +after):\n%s", diff)
	}
	if rep.File != "" {
		t.Errorf("file %q written with nothing to set", rep.File)
	}
}

func TestApplyMultiValueFieldByField(t *testing.T) {
	tests := []struct {
		name, found, want string
		action            Action
	}{
		{"max lower, min and default kept", "4096\t87380\t6291456\n", "4096 87380 33554432", Raised},
		{"max equal", "1 2 33554432\n", "1 2 33554432", AlreadyHigher},
		{"max higher, others low", "1 1 67108864\n", "1 1 33554432", AlreadyHigher},
		{"min above the new max is kept", "40000000 50000000 60000000\n", "40000000 50000000 60000000", AlreadyHigher},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyTree(t, "defaults")
			p := filepath.Join(root, "net/ipv4/tcp_rmem")
			if err := os.WriteFile(p, []byte(tt.found), 0o644); err != nil {
				t.Fatal(err)
			}
			rep, err := Apply(Config{ProcRoot: procOf(root), Dir: t.TempDir(), MemBytes: testMem, CPUs: testCPUs})
			if err != nil {
				t.Fatal(err)
			}
			k := rep.Keys[7]
			if k.Key != KeyTCPRmem || k.Action != tt.action {
				t.Fatalf("got %v, want action %q", k, tt.action)
			}
			if tt.action == Raised && k.Target != tt.want {
				t.Errorf("target %q, want %q", k.Target, tt.want)
			}
			got := readKey(t, root, KeyTCPRmem)
			if tt.action == Raised && got != tt.want+"\n" {
				t.Errorf("file holds %q, want %q", got, tt.want+"\n")
			}
			if tt.action != Raised && got != tt.found {
				t.Errorf("file rewritten to %q, want %q kept", got, tt.found)
			}
		})
	}
}

// The mixed tree is a network namespace in a container, badly: no
// conntrack module, garbage values, a host-only key read-only, another
// hidden.
func TestApplyMixedTree(t *testing.T) {
	root := copyTree(t, "mixed")
	if err := os.Chmod(filepath.Join(root, "net/core/rmem_max"), 0o444); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, root)
	dir := filepath.Join(t.TempDir(), "config") // does not exist yet
	cfg := Config{ProcRoot: procOf(root), Dir: dir, MemBytes: testMem, CPUs: testCPUs}

	plan, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Apply(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type full struct {
		brief
		reason string // a part of Reason
	}
	want := []full{
		{brief{KeyConntrackMax, "", "524288", NotPresent}, "nf_conntrack module not loaded"},
		{brief{KeyConntrackBuckets, "", "524288", NotPresent}, "nf_conntrack module not loaded"},
		{brief{KeySomaxconn, "garbage", "32768", Malformed}, "field 1 of \"garbage"},
		{brief{KeyTCPMaxSynBacklog, "-1", "32768", Malformed}, "not an unsigned number"},
		{brief{KeyNetdevMaxBacklog, "", "10240", CannotWrite}, "host-only key: not visible inside a network namespace"},
		{brief{KeyRmemMax, "212992", "33554432", CannotWrite}, "host-only key: read-only inside a network namespace (mode 0444)"},
		{brief{KeyWmemMax, "268435456", "33554432", AlreadyHigher}, ""},
		{brief{KeyTCPRmem, "4096 131072 6291456", "4096 131072 33554432", Raised}, ""},
		{brief{KeyTCPWmem, "4096 16384", "- - 33554432", Malformed}, "2 fields"},
	}
	for i, w := range want {
		for _, r := range []struct {
			name string
			rep  Report
		}{{"Apply", rep}, {"Plan", plan}} {
			got := r.rep.Keys[i]
			wb := w.brief
			if r.name == "Plan" && wb.Action == Raised {
				wb.Action = WouldRaise
			}
			if diff := cmp.Diff(wb, briefs([]KeyResult{got})[0]); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", r.name, w.Key, diff)
			}
			if !strings.Contains(got.Reason, w.reason) || (w.reason == "") != (got.Reason == "") {
				t.Errorf("%s %s: reason %q, want one with %q", r.name, w.Key, got.Reason, w.reason)
			}
		}
	}
	after := snapshot(t, root)
	for _, p := range []string{"/net/core/somaxconn", "/net/ipv4/tcp_max_syn_backlog", "/net/ipv4/tcp_wmem", "/net/core/rmem_max", "/net/core/wmem_max"} {
		if after[p] != before[p] {
			t.Errorf("%s was written over: %q, was %q", p, after[p], before[p])
		}
	}
	if want := filepath.Join(dir, FileName); rep.File != want {
		t.Fatalf("file %q, want %q", rep.File, want)
	}
	got, err := os.ReadFile(rep.File)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "mixed.conf.golden", got)
	if keys := fileKeys(t, string(got)); !cmp.Equal(keys, []string{
		"net.core.netdev_max_backlog = 10240",
		"net.core.rmem_max = 33554432",
	}) {
		t.Errorf("file sets %q, want exactly the two keys that could not be written", keys)
	}
	fi, err := os.Stat(rep.File)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("file mode %04o, want 0644", fi.Mode().Perm())
	}

	// At the next start the file is rewritten, the same; once the host
	// takes the values, it goes.
	rep2, err := Apply(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got2, _ := os.ReadFile(rep2.File); !bytes.Equal(got, got2) {
		t.Errorf("second start wrote a different file:\n%s", got2)
	}
	if err := os.Chmod(filepath.Join(root, "net/core/rmem_max"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "net/core/netdev_max_backlog"), []byte("20000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep3, err := Apply(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep3.File != "" {
		t.Errorf("file %q kept with nothing left to set", rep3.File)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("file not removed: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left in %s: %v", dir, ents)
	}
}

// fileKeys returns the key = value lines of a sysctl.d file.
func fileKeys(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out
}

func TestRunErrors(t *testing.T) {
	root := copyTree(t, "defaults")
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A meminfo procfs parses, without MemTotal.
	garbage := t.TempDir()
	if err := os.WriteFile(filepath.Join(garbage, "meminfo"), []byte("MemFree: 1 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := procOf(copyTree(t, "defaults"))
	if err := unix.Mkfifo(filepath.Join(fifo, "meminfo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no root", Config{ProcRoot: filepath.Join(root, "nope"), MemBytes: testMem}, "reading sysctl root"},
		{"root is a file", Config{ProcRoot: notDir, MemBytes: testMem}, "is not a directory"},
		{"no meminfo", Config{ProcRoot: procOf(root)}, "reading memory size"},
		{"meminfo garbage", Config{ProcRoot: garbage}, "no MemTotal line"},
		{"meminfo a FIFO", Config{ProcRoot: fifo}, "meminfo is a named pipe (FIFO), not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, f := range []func(Config) (Report, error){Plan, Apply} {
				_, err := f(tt.cfg)
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %v, want one with %q", err, tt.want)
				}
			}
		})
	}

	// The file cannot be written: the report is still there.
	mixed := copyTree(t, "mixed")
	rep, err := Apply(Config{ProcRoot: procOf(mixed), Dir: notDir, MemBytes: testMem, CPUs: testCPUs})
	if err == nil || !strings.Contains(err.Error(), FileName) {
		t.Errorf("error %v, want one naming %s", err, FileName)
	}
	if len(rep.Keys) != 9 || rep.File != "" {
		t.Errorf("report %+v, want 9 keys and no file", rep)
	}
}

func TestMemInfoFromFile(t *testing.T) {
	root := copyTree(t, "defaults")
	copyFile(t, "testdata/meminfo", filepath.Join(procOf(root), "meminfo"))
	rep, err := Plan(Config{ProcRoot: procOf(root), CPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	const mem = 24684096 << 10 // MemTotal in testdata/meminfo
	for i, tg := range Targets(mem, 2) {
		if k := rep.Keys[i]; k.Key != tg.Key {
			t.Fatalf("key %d is %s, want %s", i, k.Key, tg.Key)
		}
	}
	if got, want := rep.Keys[0].Target, "1542144"; got != want {
		t.Errorf("nf_conntrack_max target for 23.5 GiB %s, want %s", got, want)
	}
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMemTotal: MemTotal from a meminfo procfs parses, in bytes.
func TestMemTotal(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		err  string
	}{
		{"MemTotal:       24684096 kB\nMemFree: 1 kB\n", 24684096 << 10, ""},
		{"MemFree: 1 kB\nMemTotal: 1024 kB\n", 1 << 20, ""},
		{"MemTotal: 1024 MB\n", 0, "nsupported unit"},
		{"MemTotal: 1024\n", 0, "want \"MemTotal: N kB\""},
		{"MemTotal: x kB\n", 0, "invalid syntax"},
		{"MemTotal: 0 kB\n", 0, "not a memory size"},
		{"MemTotal: 18446744073709551615 kB\n", 0, "not a memory size"},
		{"", 0, "no MemTotal line"},
	}
	for _, tt := range tests {
		got, err := memTotal(memRoot(t, tt.in))
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("memTotal(%q) = %d, %v; want %d, error with %q", tt.in, got, err, tt.want, tt.err)
		}
	}
}

// memRoot returns a ProcRoot whose meminfo is s.
func memRoot(t testing.TB, s string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "meminfo"), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func FuzzMemTotal(f *testing.F) {
	f.Add("MemTotal:       24684096 kB\n")
	f.Add("MemTotal: 18446744073709551615 kB\n")
	f.Add("MemTotal:\n")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := memTotal(memRoot(t, s))
		if err == nil && (v == 0 || v%1024 != 0) {
			t.Errorf("memTotal(%q) = %d, not a whole number of kB", s, v)
		}
	})
}

func FuzzParseValue(f *testing.F) {
	f.Add("4096\t131072\t6291456\n", uint8(3))
	f.Add("262144\n", uint8(1))
	f.Add("-1\n", uint8(1))
	f.Add("1 2", uint8(3))
	f.Add("99999999999999999999", uint8(1))
	f.Fuzz(func(t *testing.T, s string, n uint8) {
		v, err := parseValue(s, int(n))
		if err != nil {
			return
		}
		if len(v) != int(n) {
			t.Fatalf("parseValue(%q, %d) gave %d fields", s, n, len(v))
		}
		again, err := parseValue(formatFields(v), int(n))
		if err != nil || !cmp.Equal(v, again) {
			t.Errorf("round trip of %q: %v, %v", s, again, err)
		}
	})
}

// FuzzApplyValue writes whatever the kernel might show into somaxconn and
// checks that Apply raises a valid lower value, keeps a higher one, and
// never writes over anything else.
func FuzzApplyValue(f *testing.F) {
	for _, s := range []string{"4096\n", "65535\n", "32768", " 12 \n", "abc", "1 2\n", "", "-3", "0x10", "184467440737095516150"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		root := copyTree(t, "defaults")
		p := filepath.Join(root, "net/core/somaxconn")
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := Apply(Config{ProcRoot: procOf(root), Dir: t.TempDir(), MemBytes: testMem, CPUs: testCPUs})
		if err != nil {
			t.Fatal(err)
		}
		k := rep.Keys[2]
		got, _ := os.ReadFile(p)
		v, perr := parseValue(string(content), 1)
		switch {
		case perr != nil:
			if k.Action != Malformed || !bytes.Equal(got, content) {
				t.Errorf("%q: %v, file now %q; want malformed and untouched", content, k, got)
			}
		case v[0] < 32768:
			if k.Action != Raised || string(got) != "32768\n" {
				t.Errorf("%q: %v, file now %q; want raised to 32768", content, k, got)
			}
		default:
			if k.Action != AlreadyHigher || !bytes.Equal(got, content) {
				t.Errorf("%q: %v, file now %q; want already higher and untouched", content, k, got)
			}
		}
		if rep.File != "" {
			t.Errorf("%q: file %s written; somaxconn is writable", content, rep.File)
		}
	})
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	keys := []KeyResult{
		{Key: KeySomaxconn, Found: "4096", Target: "65535", Action: WouldRaise},
		{Key: KeyTCPWmem, Found: "", Target: "- - 16777216", Action: CannotWrite}, // fields unknown: not written
		{Key: KeyTCPRmem, Found: "x", Target: "1 2 3", Action: Malformed},
		{Key: KeyRmemMax, Found: "1", Target: "2", Action: NotPresent},
		{Key: "net.core.evil\nkernel.panic", Found: "1", Target: "2", Action: CannotWrite},
	}
	path, err := WriteFile(dir, keys)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fileKeys(t, string(b)); !cmp.Equal(got, []string{"net.core.somaxconn = 65535"}) {
		t.Errorf("file sets %q, want only somaxconn", got)
	}
	for _, line := range []string{"copy this file to /etc/sysctl.d/", "sudo cp 99-proofkit-sysctl.conf /etc/sysctl.d/", "sudo sysctl --system", "restart the agent"} {
		if !strings.Contains(strings.ReplaceAll(string(b), "\n# ", " "), line) {
			t.Errorf("header lacks %q:\n%s", line, b)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want the file alone (no temporary left)", len(ents))
	}
	// Nothing left to set: removed; removing again is no error.
	for range 2 {
		path, err := WriteFile(dir, keys[1:])
		if err != nil || path != "" {
			t.Fatalf("WriteFile with nothing to set = %q, %v", path, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("directory holds %v, want nothing", ents)
	}
}

// TestWriteFileHeader: a file of the values a Plan would raise (the
// agent's "write the file only" mode) says the agent was told not to set
// them, never that it could not; a file of values Apply could not set
// says why.
func TestWriteFileHeader(t *testing.T) {
	tests := []struct {
		name      string
		keys      []KeyResult
		want, not string
	}{
		{"planned", []KeyResult{{Key: KeySomaxconn, Found: "4096", Target: "65535", Action: WouldRaise}},
			"It was told\n# to write the kernel values it would raise to this file rather than set\n# them", "could not"},
		{"planned, one key read-only too", []KeyResult{
			{Key: KeySomaxconn, Found: "4096", Target: "65535", Action: WouldRaise},
			{Key: KeyRmemMax, Found: "212992", Target: "33554432", Action: CannotWrite, Reason: "host-only key: read-only inside a network namespace (mode 0444)"},
		}, "# host-only key: read-only inside a network namespace (mode 0444); found 212992\nnet.core.rmem_max = 33554432", "could not\n# set these kernel values"},
		{"applied", []KeyResult{{Key: KeySomaxconn, Found: "4096", Target: "65535", Action: CannotWrite, Reason: "read-only /proc/sys (EROFS)"}},
			"it could not\n# set these kernel values itself", "was told"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			content, n := fileContent(tt.keys)
			if n != len(tt.keys) {
				t.Errorf("%d keys in the file, want %d", n, len(tt.keys))
			}
			if !strings.Contains(content, tt.want) || strings.Contains(content, tt.not) {
				t.Errorf("file lacks %q or holds %q:\n%s", tt.want, tt.not, content)
			}
		})
	}
}

func TestWriteReason(t *testing.T) {
	hostOnly, perNetns := specOf(KeyRmemMax), specOf(KeySomaxconn)
	tests := []struct {
		spec keySpec
		err  error
		want string
	}{
		{perNetns, &fs.PathError{Op: "open", Path: "p", Err: unix.EROFS}, "read-only /proc/sys (EROFS)"},
		{hostOnly, &fs.PathError{Op: "open", Path: "p", Err: unix.EROFS}, "read-only /proc/sys (EROFS)"},
		{hostOnly, &fs.PathError{Op: "open", Path: "p", Err: unix.EACCES}, "host-only key: not writable from this network namespace or without CAP_NET_ADMIN on the host (permission denied)"},
		{hostOnly, unix.EPERM, "host-only key"},
		{perNetns, &fs.PathError{Op: "open", Path: "p", Err: unix.EPERM}, "no permission: needs root with CAP_NET_ADMIN (operation not permitted)"},
		{perNetns, &fs.PathError{Op: "write", Path: "p", Err: unix.EINVAL}, "write failed: write p: invalid argument"},
	}
	for _, tt := range tests {
		if got := writeReason(tt.spec, tt.err); !strings.Contains(got, tt.want) {
			t.Errorf("writeReason(%v) = %q, want one with %q", tt.err, got, tt.want)
		}
	}
}

// BenchmarkPlan reads the live /proc/sys: what the agent pays at start.
func BenchmarkPlan(b *testing.B) {
	cfg := Config{Dir: b.TempDir()}
	for b.Loop() {
		if _, err := Plan(cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecide: the pure step of a key, from the fields found and the
// target to keep, raise or cannot.
func TestDecide(t *testing.T) {
	one := keySpec{fields: 1}
	host := keySpec{fields: 1, hostOnly: true}
	three := keySpec{fields: 3}
	tests := []struct {
		name   string
		spec   keySpec
		found  []uint64
		target string
		perm   fs.FileMode
		action Action
		value  string
		reason string
	}{
		{"lower: raise", one, []uint64{4096}, "65535", 0o644, WouldRaise, "65535", ""},
		{"equal: keep", one, []uint64{65535}, "65535", 0o644, AlreadyHigher, "65535", ""},
		{"higher: keep, never lower", one, []uint64{1 << 20}, "65535", 0o644, AlreadyHigher, "65535", ""},
		{"lower, read-only: cannot", host, []uint64{4096}, "65535", 0o444, CannotWrite, "65535", "host-only key: read-only inside a network namespace (mode 0444)"},
		{"lower, read-only, not host-only", one, []uint64{4096}, "65535", 0o444, CannotWrite, "65535", "read-only key (mode 0444)"},
		{"higher, read-only: keep", host, []uint64{1 << 20}, "65535", 0o444, AlreadyHigher, "65535", ""},
		{"max field lower: raise it alone", three, []uint64{4096, 131072, 6291456}, "- - 16777216", 0o644, WouldRaise, "4096 131072 16777216", ""},
		{"max field higher: keep, found fields shown", three, []uint64{8192, 1, 1 << 25}, "- - 16777216", 0o644, AlreadyHigher, "8192 1 16777216", ""},
		{"target does not fit", three, []uint64{1}, "- - 16777216", 0o644, Malformed, "- - 16777216", `target "- - 16777216" does not fit 1 fields`},
	}
	for _, tt := range tests {
		action, value, reason := decide(tt.spec, tt.found, tt.target, tt.perm)
		if action != tt.action || value != tt.value || reason != tt.reason {
			t.Errorf("%s: decide = %s, %q, %q; want %s, %q, %q", tt.name, action, value, reason, tt.action, tt.value, tt.reason)
		}
	}
}

// TestKeyFIFO: a key that is a named pipe (a FIFO left in a -proc tree)
// is reported as malformed, naming its path, and never blocks the run.
func TestKeyFIFO(t *testing.T) {
	root := copyTree(t, "defaults")
	path := filepath.Join(root, "net/core/somaxconn")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(Config) (Report, error){Plan, Apply} {
		rep, err := f(Config{ProcRoot: procOf(root), Dir: t.TempDir(), MemBytes: testMem, CPUs: testCPUs})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range rep.Keys {
			if k.Key == KeySomaxconn && (k.Action != Malformed || !strings.Contains(k.Reason, path+" is a named pipe (FIFO), not a regular file")) {
				t.Errorf("somaxconn as a FIFO: %v", k)
			}
		}
	}
}
