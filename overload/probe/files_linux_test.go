package probe

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/procfs"
)

func fixtureFS(t testing.TB, dir string) procfs.FS {
	t.Helper()
	fs, err := procfs.NewFS(dir)
	if err != nil {
		t.Fatalf("procfs.NewFS(%s): %v", dir, err)
	}
	return fs
}

func TestMemoryUsedPercent(t *testing.T) {
	tests := []struct {
		name    string
		want    float64 // percent, when ok
		wantErr bool
	}{
		{name: "real", want: (24684096.0 - 23638868.0) / 24684096.0 * 100},
		{name: "no-memavailable", wantErr: true},
		{name: "avail-above-total", wantErr: true},
		{name: "total-zero", wantErr: true},
		{name: "garbage", wantErr: true},
		{name: "not-a-number", wantErr: true},
		{name: "empty", wantErr: true},
		{name: "truncated", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := memoryUsedPercent(fixtureFS(t, filepath.Join("testdata", "meminfo", tt.name)))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("memoryUsedPercent = %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("memoryUsedPercent: %v", err)
			}
			if math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("memoryUsedPercent = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLoad15(t *testing.T) {
	tests := []struct {
		name    string
		want    float64
		wantErr bool
	}{
		{name: "real", want: 2.97},
		{name: "empty", wantErr: true},
		{name: "short", wantErr: true},
		{name: "nan", wantErr: true},
		{name: "negative", wantErr: true},
		{name: "words", wantErr: true},
		{name: "huge", wantErr: true}, // above 2^22: no machine runs so many tasks
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := load15(fixtureFS(t, filepath.Join("testdata", "loadavg", tt.name)))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("load15 = %v, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("load15 = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestListenCounters(t *testing.T) {
	tests := []struct {
		name             string
		overflows, drops uint64
		wantErr          bool
	}{
		{name: "real"},
		{name: "busy", overflows: 14, drops: 37},
		{name: "odd-lines", wantErr: true},
		{name: "mismatch", wantErr: true},
		{name: "words", wantErr: true},
		{name: "no-tcpext", wantErr: true},
		{name: "empty", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc, err := fixtureFS(t, filepath.Join("testdata", "netstat", tt.name)).Proc(1)
			if err != nil {
				t.Fatal(err)
			}
			o, d, err := listenCounters(proc)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("listenCounters = %d, %d, want an error", o, d)
				}
				return
			}
			if err != nil || o != tt.overflows || d != tt.drops {
				t.Fatalf("listenCounters = %d, %d, %v; want %d, %d", o, d, err, tt.overflows, tt.drops)
			}
		})
	}
}

func TestParseConntrackStat(t *testing.T) {
	tests := []struct {
		file    string
		want    []uint64
		wantErr bool
	}{
		{file: "real.txt", want: []uint64{0, 0}},
		{file: "busy.txt", want: []uint64{2 + 0x19 + 3, 0xc + 1}},
		{file: "kernel4.txt", want: []uint64{7, 1, 2, 0}},
		{file: "empty.txt", wantErr: true},
		{file: "header-only.txt", wantErr: true},
		{file: "no-header.txt", wantErr: true},
		{file: "short-line.txt", wantErr: true},
		{file: "not-hex.txt", wantErr: true},
		{file: "overflow.txt", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "nf_conntrack", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseConntrackStat(bytes.NewReader(b))
			if tt.wantErr {
				if !errors.Is(err, errMalformed) {
					t.Fatalf("parseConntrackStat = %v, %v; want a malformed error", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseConntrackStat: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("parseConntrackStat = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("parseConntrackStat = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestParseSpeed(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{in: "10000\n", want: 10000},
		{in: "1000", want: 1000},
		{in: "-1\n", want: 0},
		{in: "0\n", want: 0},
		{in: "", wantErr: true},
		{in: "fast", wantErr: true},
		{in: "99999999999999999999", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseSpeed([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseSpeed(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestPerCPUDelta(t *testing.T) {
	tests := []struct {
		name      string
		prev, cur map[int]uint64
		want      uint64
		ok        bool
	}{
		{name: "growth", prev: map[int]uint64{0: 5, 1: 7}, cur: map[int]uint64{0: 6, 1: 10}, want: 4, ok: true},
		{name: "still", prev: map[int]uint64{0: 5}, cur: map[int]uint64{0: 5}, want: 0, ok: true},
		{name: "one CPU went back", prev: map[int]uint64{0: 5, 1: 7}, cur: map[int]uint64{0: 100, 1: 6}},
		{name: "wrap of a 32-bit counter", prev: map[int]uint64{0: math.MaxUint32}, cur: map[int]uint64{0: 3}},
		{name: "CPU set changed", prev: map[int]uint64{0: 5, 1: 7}, cur: map[int]uint64{0: 5, 2: 7}},
		{name: "fewer CPUs", prev: map[int]uint64{0: 5, 1: 7}, cur: map[int]uint64{0: 5}},
	}
	for _, tt := range tests {
		got, ok := perCPUDelta(tt.prev, tt.cur)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: perCPUDelta = %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// writeFixture writes data to dir/rel and returns a procfs.FS at dir.
func writeFixture(t *testing.T, rel string, data []byte) procfs.FS {
	dir := t.TempDir()
	path := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return fixtureFS(t, dir)
}

func addFiles(f *testing.F, glob string) {
	paths, err := filepath.Glob(glob)
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seed files for %s: %v", glob, err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzMemoryUsedPercent(f *testing.F) {
	addFiles(f, "testdata/meminfo/*/meminfo")
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := memoryUsedPercent(writeFixture(t, "meminfo", data))
		if err == nil && (math.IsNaN(v) || v < 0 || v > 100) {
			t.Fatalf("memoryUsedPercent = %v with no error", v)
		}
	})
}

func FuzzLoad15(f *testing.F) {
	addFiles(f, "testdata/loadavg/*/loadavg")
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := load15(writeFixture(t, "loadavg", data))
		if err == nil && (math.IsNaN(v) || math.IsInf(v, 0) || v < 0) {
			t.Fatalf("load15 = %v with no error", v)
		}
	})
}

func FuzzListenCounters(f *testing.F) {
	addFiles(f, "testdata/netstat/*/1/net/netstat")
	f.Fuzz(func(t *testing.T, data []byte) {
		proc, err := writeFixture(t, "1/net/netstat", data).Proc(1)
		if err != nil {
			t.Fatal(err)
		}
		_, _, _ = listenCounters(proc)
	})
}

func FuzzParseConntrackStat(f *testing.F) {
	addFiles(f, "testdata/nf_conntrack/*.txt")
	f.Fuzz(func(t *testing.T, data []byte) {
		sums, err := parseConntrackStat(bytes.NewReader(data))
		if err == nil && len(sums) == 0 {
			t.Fatal("parseConntrackStat: no error and no CPU")
		}
		for _, s := range sums {
			if s > 3*math.MaxUint32 {
				t.Fatalf("parseConntrackStat: sum %d above three 32-bit counters", s)
			}
		}
	})
}

func FuzzParseSpeed(f *testing.F) {
	for _, s := range []string{"10000\n", "-1\n", "", "x", "1e3"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = parseSpeed(data)
	})
}

// TestNoteOfGarbage: a note made from a malformed file's error is
// printable and bounded, whatever bytes the file held.
func TestNoteOfGarbage(t *testing.T) {
	garbage := []byte("MemTotal: \x00\x01\xff\xfe\x1b[31m")
	garbage = append(garbage, bytes.Repeat([]byte("\x00é\x7f"), 400)...)
	_, err := memoryUsedPercent(writeFixture(t, "meminfo", garbage))
	if err == nil {
		t.Fatal("memoryUsedPercent of garbage: no error")
	}
	var a accumulator
	a.note("memory: %v", err)
	a.note("%s", "é"+string(bytes.Repeat([]byte("é"), 600)))
	a.note("%s", "short and clean")
	for _, n := range a.notes {
		if len(n) > maxNote {
			t.Errorf("note of %d bytes, want at most %d: %q", len(n), maxNote, n)
		}
		if !utf8.ValidString(n) {
			t.Errorf("note is not valid UTF-8: %q", n)
		}
		for _, r := range n {
			if !unicode.IsPrint(r) {
				t.Errorf("note holds %U: %q", r, n)
				break
			}
		}
	}
	if got := a.notes[2]; got != "short and clean" {
		t.Errorf("clean note = %q, want it unchanged", got)
	}
}
