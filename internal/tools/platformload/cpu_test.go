package main

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	// A command with a space and a parenthesis, as a process may name itself.
	line := "4242 (postgres: a) b) S 4000 4242 4242 0 -1 4194560 100 0 0 0 7 3 5 2 20 0 1 0 1000 1000 100\n"
	s, ok := parseStat([]byte(line))
	if !ok {
		t.Fatal("not parsed")
	}
	want := procStat{pid: 4242, ppid: 4000, utime: 7, stime: 3, cutime: 5, cstime: 2}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	if s.cpu() != 10*clockTick || s.exitedCPU() != 7*clockTick {
		t.Fatalf("cpu %v, exited %v", s.cpu(), s.exitedCPU())
	}
	for _, bad := range []string{"", "4242 no parenthesis", "4242 (short) S 1 2"} {
		if _, ok := parseStat([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, ok := readStat(os.Getpid()); !ok {
		t.Error("this process's stat not read")
	}
}

func TestParseMachineCPU(t *testing.T) {
	for _, c := range []struct {
		in           string
		total, steal int64
	}{
		{"cpu  2305312 139175 930219 2768658 36703 0 248095 63033 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n", 6491195, 63033},
		{"cpu  10 0 5 100 0 0 0\n", 115, 0}, // a kernel without steal
		{"cpu0 1 2 3 4 5 6 7 8\n", 0, 0},
		{"cpu  1 x 3 4 5 6 7 8\n", 0, 0},
		{"", 0, 0},
	} {
		if total, steal := parseMachineCPU([]byte(c.in)); total != c.total || steal != c.steal {
			t.Errorf("parseMachineCPU(%q) = %d, %d; want %d, %d", c.in, total, steal, c.total, c.steal)
		}
	}
}
