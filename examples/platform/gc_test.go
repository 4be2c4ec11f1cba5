package main

import "testing"

// TestGCSettings: GOGC and the memory limit default to gcPercent and
// half the memory, each unless the environment sets it.
func TestGCSettings(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		gogc, memlimit string
		memory         uint64
		percent        int
		limit          int64
	}{
		{"", "", 8 * gib, gcPercent, 4 * gib},
		{"", "", 0, gcPercent, -1},
		{"100", "", 8 * gib, -1, 4 * gib},
		{"off", "2GiB", 8 * gib, -1, -1},
		{"", "2GiB", 8 * gib, gcPercent, -1},
	} {
		p, l := gcSettings(tc.gogc, tc.memlimit, tc.memory)
		if p != tc.percent || l != tc.limit {
			t.Errorf("gcSettings(%q, %q, %d) = %d, %d, want %d, %d", tc.gogc, tc.memlimit, tc.memory, p, l, tc.percent, tc.limit)
		}
	}
	if got := memTotal([]byte("MemFree: 1 kB\nMemTotal:       24683568 kB\n")); got != 24683568<<10 {
		t.Errorf("memTotal = %d", got)
	}
	for in, want := range map[string]uint64{"max\n": 0, "2147483648\n": 2 << 30, "": 0, "x": 0} {
		if got, _ := cgroupMax([]byte(in)); got != want {
			t.Errorf("cgroupMax(%q) = %d, want %d", in, got, want)
		}
	}
	if m := processMemory(); m == 0 {
		t.Log("no memory figure here: the limit is left unset")
	}
}
