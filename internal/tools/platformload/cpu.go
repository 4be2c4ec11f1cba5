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
	var total time.Duration
	add := func(stat []byte) (pid, ppid int) {
		// pid (comm) state ppid … utime(14) stime(15)
		end := bytes.LastIndexByte(stat, ')')
		if end < 0 {
			return 0, 0
		}
		pid, _ = strconv.Atoi(string(bytes.TrimSpace(stat[:bytes.IndexByte(stat, '(')])))
		f := bytes.Fields(stat[end+1:])
		if len(f) < 13 {
			return 0, 0
		}
		ppid, _ = strconv.Atoi(string(f[1]))
		if want[pid] || (children && want[ppid]) {
			u, _ := strconv.ParseInt(string(f[11]), 10, 64)
			s, _ := strconv.ParseInt(string(f[12]), 10, 64)
			total += time.Duration(u+s) * clockTick
		}
		if children && want[pid] && len(f) >= 15 {
			// The children that exited (an autovacuum worker, a closed
			// session): their whole CPU, which the parent collected.
			u, _ := strconv.ParseInt(string(f[13]), 10, 64)
			s, _ := strconv.ParseInt(string(f[14]), 10, 64)
			total += time.Duration(u+s) * clockTick
		}
		return pid, ppid
	}
	if !children {
		for _, p := range pids {
			if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "stat")); err == nil {
				add(b)
			}
		}
		return total
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		if b, err := os.ReadFile(s); err == nil {
			add(b)
		}
	}
	return total
}
