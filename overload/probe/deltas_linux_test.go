package probe

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

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
