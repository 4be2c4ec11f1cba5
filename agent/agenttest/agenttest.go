// Package agenttest writes fake node trees (a /proc and a /sys) that the
// real probe reads, so a test can run the agent binary with -proc and -sys
// pointing at them and drive a node into overload by rewriting a file.
//
// Which file drives which input, under the tree's proc/:
//
//	meminfo                            memory (MemTotal, MemAvailable)
//	loadavg                            load (15-minute average; the CPU count is the real one)
//	sys/net/netfilter/nf_conntrack_count, nf_conntrack_max
//	                                   conntrack fill
//	1/task/1/net/netstat               listen drops (TcpExt ListenDrops, a counter: raise it)
//	1/task/1/net/stat/nf_conntrack     conntrack drops, but only when ctnetlink cannot be
//	                                   used (not root): as root the probe reads the real
//	                                   kernel's per-CPU counters
//	thread-self -> 1/task/1            where the probe finds the two files above
//	sys/kernel/random/boot_id          the kernel's identity (a change resets deltas)
//	sys/net/core/…, sys/net/ipv4/…     the keys -sysctl reads and raises (WriteSysctl)
//
// Links and their byte counters always come from the real network
// namespace (netlink); their speeds from sys/class/net/IF/speed under the
// /sys tree, which WriteNode leaves empty, so bandwidth is missing unless
// the agent is given -link-speed.
//
//	dir := t.TempDir()
//	agenttest.WriteNode(dir, agenttest.Node{MemoryUsedPercent: 40})
//	// run: proofkit-agent -proc dir/proc -sys dir/sys -sysctl off …
//	agenttest.WriteNode(dir, agenttest.Node{MemoryUsedPercent: 95}) // overloaded in 3 readings
//
// [FIFO] puts a named pipe that nobody writes in place of one of the
// tree's files, to check that a reading refuses it and ends by its
// deadline.
package agenttest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/proofkit/nodekit/internal/atomicfile"
)

// Node is the state a fake tree shows. Zero fields take the defaults
// given.
type Node struct {
	// MemTotalKiB is MemTotal; 0 means 8 GiB.
	MemTotalKiB uint64
	// MemoryUsedPercent sets MemAvailable to MemTotal × (1 − p/100).
	MemoryUsedPercent float64
	// Load15 is the 15-minute load average.
	Load15 float64
	// ConntrackCount and ConntrackMax are the table's entries and size;
	// a max of 0 means 262144.
	ConntrackCount, ConntrackMax uint64
	// ListenDrops is the TcpExt ListenDrops (and ListenOverflows) counter:
	// the probe reports its rise between readings.
	ListenDrops uint64
	// ConntrackDrops is the drop counter of net/stat/nf_conntrack (one
	// CPU), read only when ctnetlink is not available.
	ConntrackDrops uint64
	// BootID is the kernel's boot id; "" means a fixed one.
	BootID string
}

// Proc and Sys return the roots to pass as -proc and -sys.
func Proc(dir string) string { return filepath.Join(dir, "proc") }
func Sys(dir string) string  { return filepath.Join(dir, "sys") }

// WriteNode writes (or rewrites) the tree under dir for n. Each file is
// replaced atomically, so an agent reading meanwhile sees the old value or
// the new one.
func WriteNode(dir string, n Node) error {
	if n.MemTotalKiB == 0 {
		n.MemTotalKiB = 8 << 20
	}
	if n.ConntrackMax == 0 {
		n.ConntrackMax = 262144
	}
	if n.BootID == "" {
		n.BootID = "5d2e3c51-9a3b-4a53-8f0a-6f1b7f3d9c11"
	}
	if n.MemoryUsedPercent < 0 || n.MemoryUsedPercent > 100 {
		return fmt.Errorf("write node: memory used %v %%: want 0 to 100", n.MemoryUsedPercent)
	}
	avail := uint64(float64(n.MemTotalKiB) * (1 - n.MemoryUsedPercent/100))
	proc := Proc(dir)
	files := map[string]string{
		"meminfo": fmt.Sprintf("MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\nBuffers:               0 kB\nCached:                0 kB\n",
			n.MemTotalKiB, avail, avail),
		"loadavg":                              fmt.Sprintf("%.2f %.2f %.2f 1/200 4242\n", n.Load15, n.Load15, n.Load15),
		"sys/net/netfilter/nf_conntrack_count": fmt.Sprintf("%d\n", n.ConntrackCount),
		"sys/net/netfilter/nf_conntrack_max":   fmt.Sprintf("%d\n", n.ConntrackMax),
		"sys/kernel/random/boot_id":            n.BootID + "\n",
		"1/task/1/net/netstat": fmt.Sprintf("TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 %d %d\n"+
			"IpExt: InNoRoutes InOctets\nIpExt: 0 0\n", n.ListenDrops, n.ListenDrops),
		"1/task/1/net/stat/nf_conntrack": "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart\n" +
			fmt.Sprintf("%08x  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 %08x 00000000 00000000  00000000 00000000 00000000 00000000\n",
				n.ConntrackCount, n.ConntrackDrops),
	}
	for name, content := range files {
		if err := writeFile(filepath.Join(proc, name), content); err != nil {
			return fmt.Errorf("write node: %w", err)
		}
	}
	link := filepath.Join(proc, "thread-self")
	if _, err := os.Lstat(link); err != nil {
		if err := os.Symlink("1/task/1", link); err != nil {
			return fmt.Errorf("write node: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(Sys(dir), "class", "net"), 0o755); err != nil {
		return fmt.Errorf("write node: %w", err)
	}
	return nil
}

// KernelDefaults are the values a fresh kernel shows for the keys -sysctl
// sizes (a machine with more than 4 GiB), as WriteSysctl takes them.
func KernelDefaults() map[string]string {
	return map[string]string{
		"net.netfilter.nf_conntrack_max":     "262144",
		"net.netfilter.nf_conntrack_buckets": "262144",
		"net.core.somaxconn":                 "4096",
		"net.ipv4.tcp_max_syn_backlog":       "1024",
		"net.core.netdev_max_backlog":        "1000",
		"net.core.rmem_max":                  "212992",
		"net.core.wmem_max":                  "212992",
		"net.ipv4.tcp_rmem":                  "4096\t131072\t6291456",
		"net.ipv4.tcp_wmem":                  "4096\t16384\t4194304",
	}
}

// WriteSysctl writes each key's value under dir's proc/sys, as
// /proc/sys shows it (net.core.somaxconn → proc/sys/net/core/somaxconn).
func WriteSysctl(dir string, values map[string]string) error {
	for k, v := range values {
		if err := writeFile(sysctlPath(dir, k), v+"\n"); err != nil {
			return fmt.Errorf("write sysctl %s: %w", k, err)
		}
	}
	return nil
}

// ReadSysctl returns a key's value under dir's proc/sys, without the
// trailing newline.
func ReadSysctl(dir, key string) (string, error) {
	b, err := os.ReadFile(sysctlPath(dir, key))
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", key, err)
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// sysctlPath is where dir's proc/sys shows key.
func sysctlPath(dir, key string) string {
	return filepath.Join(Proc(dir), "sys", filepath.FromSlash(strings.ReplaceAll(key, ".", "/")))
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, []byte(content), 0o644)
}
