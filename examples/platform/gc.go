package main

import (
	"bufio"
	"bytes"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The garbage collector's pace, when the environment sets none.
//
// At fleet scale the platform's live heap is mostly the node cache
// (-db-cache, up to 200,000 nodes; about 210 MB at 100,000 nodes), and
// each report allocates about 10 KB that die with it. Go's default,
// GOGC=100, collects whenever the heap has grown by the live heap: a
// cycle every 2 to 3 s at 3,300 reports/s, each marking the whole cache,
// which came to a fifth of the platform's CPU. GOGC=300 lets the heap
// grow by three times the live heap first: a third of the cycles, for a
// heap of at most four times the live one (about 860 MB at 100,000
// nodes, where the default allows about 430 MB).
//
// That bound follows the live heap, which the cache bounds; the memory
// limit keeps it within the machine's too: half of the memory the
// process may use (the cgroup's memory.max, else MemTotal), past which
// the collector runs as often as it needs to stay under it, whatever
// GOGC says. Only a live heap near the limit makes it run more often
// than GOGC=100 would; and the default would then need more than the
// whole memory.
//
// GOGC or GOMEMLIMIT in the environment, as for any Go program, sets
// its own and leaves the other as the runtime's or as here.
const (
	gcPercent      = 300
	gcLimitDivisor = 2 // the limit: memory / gcLimitDivisor
)

// gcSettings returns the GC percent and memory limit to set, -1 for
// each the environment sets (gogc, memlimit: GOGC and GOMEMLIMIT's
// values) or that memory (bytes the process may use, 0: not known)
// does not give.
func gcSettings(gogc, memlimit string, memory uint64) (percent int, limit int64) {
	percent, limit = -1, -1
	if gogc == "" {
		percent = gcPercent
	}
	if memlimit == "" && memory > 0 {
		limit = int64(min(memory/gcLimitDivisor, 1<<62))
	}
	return percent, limit
}

// setGC sets the garbage collector's pace (see gcPercent) and returns
// the settings in words for the start's log line.
func setGC() (percent, limit string) {
	p, l := gcSettings(os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT"), processMemory())
	percent, limit = "GOGC "+os.Getenv("GOGC"), "GOMEMLIMIT "+os.Getenv("GOMEMLIMIT")
	if p >= 0 {
		debug.SetGCPercent(p)
		percent = strconv.Itoa(p)
	}
	if l >= 0 {
		debug.SetMemoryLimit(l)
		limit = strconv.FormatInt(l>>20, 10) + " MiB"
	} else if os.Getenv("GOMEMLIMIT") == "" {
		limit = "none"
	}
	return percent, limit
}

// processMemory returns the memory the process may use: the cgroup
// (v2) limit when it has one below the machine's memory, else the
// machine's; 0 when neither can be read (off Linux).
func processMemory() uint64 {
	total := memTotal(readFile("/proc/meminfo"))
	if cg, ok := cgroupMax(readFile("/sys/fs/cgroup/memory.max")); ok && (total == 0 || cg < total) {
		return cg
	}
	return total
}

func readFile(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

// memTotal parses /proc/meminfo's MemTotal, in bytes; 0 if none.
func memTotal(meminfo []byte) uint64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, ok := strings.CutSuffix(strings.TrimSpace(rest), " kB")
		n, err := strconv.ParseUint(kb, 10, 64)
		if !ok || err != nil || n > 1<<50 {
			return 0
		}
		return n << 10
	}
	return 0
}

// cgroupMax parses a cgroup v2 memory.max: a number of bytes, or "max"
// (no limit, ok false).
func cgroupMax(b []byte) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil && n > 0
}
