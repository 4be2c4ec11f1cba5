package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of /proc/PID/stat's times.
const clockTick = 10 * time.Millisecond

// procStat is what the harness reads of a process's /proc/PID/stat: the
// process, its parent, its CPU and that of its children that exited
// (collected by it), in clock ticks.
type procStat struct {
	pid, ppid      int
	utime, stime   int64
	cutime, cstime int64
}

// cpu is the process's own CPU, user and system.
func (s procStat) cpu() time.Duration { return time.Duration(s.utime+s.stime) * clockTick }

// exitedCPU is the CPU of the process's children that exited.
func (s procStat) exitedCPU() time.Duration { return time.Duration(s.cutime+s.cstime) * clockTick }

// parseStat parses one /proc/PID/stat: pid (comm) state ppid … utime(14)
// stime(15) cutime(16) cstime(17). The command may hold spaces and
// parentheses, so the fields are counted from its last ')'.
func parseStat(b []byte) (procStat, bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, false
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 15 {
		return procStat{}, false
	}
	var s procStat
	s.pid, _ = strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	s.ppid, _ = strconv.Atoi(string(f[1]))
	s.utime, _ = strconv.ParseInt(string(f[11]), 10, 64)
	s.stime, _ = strconv.ParseInt(string(f[12]), 10, 64)
	s.cutime, _ = strconv.ParseInt(string(f[13]), 10, 64)
	s.cstime, _ = strconv.ParseInt(string(f[14]), 10, 64)
	return s, true
}

// readStat reads process pid's stat.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	return parseStat(b)
}

// allStats reads the stat of every process there is.
func allStats() []procStat {
	var out []procStat
	files, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			if s, ok := parseStat(b); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// cpuTime is the CPU (user + system) the processes pids, and with
// children also every process whose parent is one of them, alive or
// exited (collected by its parent), have used so far. Processes pids gone
// are not counted: take it before and after a run of processes that live
// through it.
func cpuTime(pids []int, children bool) time.Duration {
	want := map[int]bool{}
	for _, p := range pids {
		want[p] = true
	}
	var stats []procStat
	if children {
		stats = allStats()
	} else {
		for _, p := range pids {
			if s, ok := readStat(p); ok {
				stats = append(stats, s)
			}
		}
	}
	var total time.Duration
	for _, s := range stats {
		if want[s.pid] || (children && want[s.ppid]) {
			total += s.cpu()
		}
		if children && want[s.pid] {
			// The children that exited (an autovacuum worker, a closed
			// session): their whole CPU, which the parent collected.
			total += s.exitedCPU()
		}
	}
	return total
}

// machineCPU is the machine's CPU time from /proc/stat's first line, in
// clock ticks: all of it, and what the hypervisor took for others
// (steal); zeros if unreadable.
func machineCPU() (total, steal int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	return parseMachineCPU(b)
}

// parseMachineCPU parses /proc/stat's "cpu" line: user nice system idle
// iowait irq softirq steal … (guest times are within user and nice).
func parseMachineCPU(b []byte) (total, steal int64) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, 0
		}
		total += n
		if i == 7 {
			steal = n
		}
	}
	return total, steal
}
