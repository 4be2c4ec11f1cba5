package sysctl

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The keys this package sizes, in the order it reports them.
const (
	KeyConntrackMax            = "net.netfilter.nf_conntrack_max"
	KeyConntrackBuckets        = "net.netfilter.nf_conntrack_buckets"
	KeySomaxconn               = "net.core.somaxconn"
	KeyTCPMaxSynBacklog        = "net.ipv4.tcp_max_syn_backlog"
	KeyNetdevMaxBacklog        = "net.core.netdev_max_backlog"
	KeyRmemMax                 = "net.core.rmem_max"
	KeyWmemMax                 = "net.core.wmem_max"
	KeyTCPRmem                 = "net.ipv4.tcp_rmem"
	KeyTCPWmem                 = "net.ipv4.tcp_wmem"
	keepField                  = "-"
	gib                 uint64 = 1 << 30
	mib                 uint64 = 1 << 20
)

// A Target is the value this package wants for one key on a machine.
//
// Value is what the kernel shows in /proc/sys, fields separated by one
// space. A field this package does not size is written "-" and means "keep
// the value found": net.ipv4.tcp_rmem's target on a 4 GiB machine is
// "- - 16777216", that is, the min and default fields stay as found and
// only the max field is raised (if it is lower). Every other key has a
// single field. Why says where the figure comes from, in one line.
type Target struct {
	Key   string
	Value string
	Why   string
}

// Anchors for the connection (conntrack) table.
const (
	// conntrackEntryBytes is what one conntrack entry costs: the nf_conn
	// slab object (256 B on x86-64 6.18, /proc/slabinfo "nf_conntrack"),
	// its extension area (NAT, accounting, timestamps: a kmalloc of 64–96
	// B) and its bucket in the hash table (8 B, one bucket per entry). The
	// usual "300–350 bytes per entry" lands here; we take the top.
	conntrackEntryBytes = 352
	// conntrackBytesPerEntry: one entry per 16 KiB of memory, i.e. 65,536
	// entries per GiB, which costs 65,536 × 352 B = 22 MiB, 2.1 % of RAM.
	conntrackBytesPerEntry = 16 << 10
	// conntrackShareDivisor: whatever the floors say, the table never
	// takes more than 1/20 (5 %) of memory.
	conntrackShareDivisor = 20
	// kube-proxy's defaults (conntrack.maxPerCore, conntrack.min).
	kubeProxyPerCore = 32768
	kubeProxyMin     = 131072
)

// conntrackMax is the target for net.netfilter.nf_conntrack_max: the number
// of connections the kernel tracks before it drops new ones ("table full,
// dropping packet"), which on a VPN exit node is the number of flows the
// node can carry at all.
//
// The kernel sizes it once, at module load, from memory: since 5.15 the
// table holds one entry per bucket, with 262,144 buckets on machines with
// more than 4 GiB, 65,536 between 1 and 4 GiB, and one bucket per 128 KiB
// below that (about 7,800 on a 1 GiB VM). So the default stops at 262,144
// whatever the memory: a 64 GiB node gets the same table as a 4 GiB one.
//
// kube-proxy sizes it as 32,768 entries per CPU core with a floor of
// 131,072. Cilium sizes its own BPF conntrack map from memory instead,
// because an entry costs memory, not CPU: 0.25 % of it by default
// (bpf-map-dynamic-size-ratio=0.0025, shared with its NAT and other
// maps), about 9,500 TCP entries per GiB (284,560 on a 30 GiB node), with
// the same 131,072 floor. That share is for a pod host whose flows are a
// side line; a node whose whole job is carrying other people's flows
// gives the table a larger one.
//
// The target is one entry per 16 KiB of memory (65,536 per GiB, 2.1 % of
// RAM at 352 B an entry; seven times Cilium's figure), never below
// kube-proxy's (max(32768 × cpus, 131072)), and never above 5 % of memory
// (memBytes / 20 / 352 B), which wins on small machines with many cores.
// It is rounded down to a multiple of 1,024, and never above the largest
// int (the kernel's type for the key and for the buckets: a larger value
// is refused), which 32 TiB of memory would ask for. With one bucket per
// entry (conntrackBuckets) the whole table stays within that 5 %.
func conntrackMax(memBytes uint64, cpus int) uint64 {
	t := memBytes / conntrackBytesPerEntry
	t = max(t, uint64(max(cpus, 1))*kubeProxyPerCore, kubeProxyMin)
	t = min(t, memBytes/conntrackShareDivisor/conntrackEntryBytes, math.MaxInt32)
	return roundDown(t, 1024)
}

// conntrackBuckets is the target for net.netfilter.nf_conntrack_buckets,
// the size of the conntrack hash table: one bucket per entry of
// conntrackMax, the kernel's own ratio since 5.15, and at least 1,024 (the
// kernel's minimum).
//
// Every entry is hashed twice, once per direction, so one bucket per
// entry means chains of two on average when the table is full; the
// netfilter maintainers chose that ratio when they made it the default
// ("there should be at least twice as many buckets … than the maximum
// number of conntrack objects", 2021). kube-proxy's max/4 would mean
// chains of eight. A bucket is an 8 B list head, counted in the 352 B of
// an entry. The kernel refuses a table of more than INT_MAX bytes
// (nf_ct_alloc_hashtable: 268,435,455 buckets), which a machine of 4 TiB
// or more would ask for: there the target stops below it, and chains
// grow past two. Writable only from the host's network namespace.
func conntrackBuckets(memBytes uint64, cpus int) uint64 {
	return min(max(conntrackMax(memBytes, cpus), 1024), maxBuckets)
}

// maxBuckets is the most buckets the kernel allocates: INT_MAX bytes of
// 8 B list heads, rounded down to 1,024.
const maxBuckets = (math.MaxInt32 / 8) &^ 1023

// Anchors for the listen backlogs.
const (
	backlogBytesPerSlot = 256 << 10 // 4,096 slots per GiB
	backlogMin          = 4096      // the kernel's somaxconn default since 5.4
	backlogMax          = 65535     // what every kernel since 2.6 takes
)

// somaxconn is the target for net.core.somaxconn, the most a listener's
// accept queue may hold (listen(2)'s backlog is cut to it). When a node
// comes back or a proxy rebalances, its clients redial at once; a short
// queue turns that burst into ListenOverflows, which the overload check
// counts.
//
// The kernel default is 4,096 (since 5.4; 128 before). The target is 4,096
// per GiB of memory, from 4,096 up to 65,535 (older kernels kept the
// backlog in 16 bits). A queued connection is a full socket, ~2.4 KB (the
// TCP slab object) plus its first skb: at ~4 KiB a slot, a full queue
// costs 16 MiB per GiB, 1.6 % of RAM per listener, and only while the
// application is not accepting.
func somaxconn(memBytes uint64) uint64 {
	return backlog(memBytes)
}

// tcpMaxSynBacklog is the target for net.ipv4.tcp_max_syn_backlog, the
// most half-open connections (SYN received, handshake not done) a listener
// holds. The kernel sizes its default from the socket hash (2,048 on a
// 24 GiB machine here, 128 at least). Since the SYN queue is also cut at
// the listener's accept backlog, a SYN backlog above somaxconn buys
// nothing: the target is somaxconn's. A half-open connection is a
// request_sock of 320 B (/proc/slabinfo "request_sock_TCP"), so a full SYN
// queue costs 1.25 MiB per GiB, 0.12 % of RAM; past it, syncookies take
// over.
func tcpMaxSynBacklog(memBytes uint64) uint64 {
	return backlog(memBytes)
}

func backlog(memBytes uint64) uint64 {
	t := roundDown(memBytes/backlogBytesPerSlot, 1024)
	return min(max(t, backlogMin), backlogMax)
}

// Anchors for the per-CPU input queue.
const (
	netdevShareDivisor  = 50   // 2 % of memory across all CPUs' queues
	netdevPacketBytes   = 4096 // truesize of an MTU-1500 frame, rounded up
	netdevBacklogKernel = 1000 // the kernel default
	netdevBacklogMax    = 65536
)

// netdevMaxBacklog is the target for net.core.netdev_max_backlog, the
// packets each CPU queues when they arrive faster than the stack takes
// them; past it the kernel drops them (the second column of
// /proc/net/softnet_stat). The kernel default, 1,000, was set for
// 100 Mbit/s links; tuning guides for 10 Gbit/s go to 16,384 and more.
//
// The queues are per CPU, so the bound is too: all CPUs' queues, full, at
// 4 KiB a packet (an MTU-1500 frame's truesize, rounded up), take at most
// 2 % of memory: memBytes / 50 / (cpus × 4096), rounded down to a
// multiple of 1,024, at most 65,536, and never below the kernel's 1,000.
// A machine with 1 GiB per core gets 5,120. Host-only: a network
// namespace does not see this key.
func netdevMaxBacklog(memBytes uint64, cpus int) uint64 {
	t := memBytes / netdevShareDivisor / (uint64(max(cpus, 1)) * netdevPacketBytes)
	t = roundDown(t, 1024)
	return min(max(t, netdevBacklogKernel), netdevBacklogMax)
}

// Anchors for socket buffers.
const (
	bufShareDivisor = 256 // one socket: at most 1/256 (0.4 %) of memory
	bufMin          = 4 * mib
	bufMax          = 64 * mib
)

// socketBufferMax is the target for net.core.rmem_max and wmem_max (the
// most an application may ask for with SO_RCVBUF / SO_SNDBUF) and for the
// max field of net.ipv4.tcp_rmem and tcp_wmem (how far TCP autotuning
// grows one connection's buffers).
//
// Defaults: rmem_max and wmem_max are 212,992 B, too small for the UDP
// tunnels VPN nodes carry (quic-go asks for 7 MiB and warns when it gets
// 208 KiB); tcp_rmem's max is 6 MiB (32 MiB since Linux 6.16, as on
// this 6.18 host) and tcp_wmem's 4 MiB, one bandwidth-delay product of
// 384 Mbit/s or 256 Mbit/s at 128 ms. The target is
// 1/256 of memory (0.4 % for one socket), rounded down to a MiB, from
// 4 MiB to 64 MiB: 16 MiB at 4 GiB carries 1 Gbit/s at 128 ms, 64 MiB
// (from 16 GiB) 4 Gbit/s. This raises what one connection may hold, not
// what all of them may: tcp_mem, which the kernel sizes to ~9.4 % of
// memory for all TCP buffers together, is left alone, so the total stays
// bounded. rmem_max and wmem_max are host-only: read-only inside a
// network namespace.
func socketBufferMax(memBytes uint64) uint64 {
	t := roundDown(memBytes/bufShareDivisor, mib)
	return min(max(t, bufMin), bufMax)
}

// Targets returns the target of every key this package sizes, for a
// machine with memBytes of memory and cpus CPUs (cpus < 1 counts as 1), in
// a fixed order. It is pure: the same arguments give the same targets.
func Targets(memBytes uint64, cpus int) []Target {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	ctMax := conntrackMax(memBytes, cpus)
	backlog := somaxconn(memBytes)
	buf := socketBufferMax(memBytes)
	third := "- - " + u(buf)
	return []Target{
		{KeyConntrackMax, u(ctMax), "one entry per 16 KiB of memory, at least max(32768 × cpus, 131072) (kube-proxy), at most 5 % of memory at 352 B an entry"},
		{KeyConntrackBuckets, u(conntrackBuckets(memBytes, cpus)), "one bucket per entry of nf_conntrack_max, the kernel's own ratio since 5.15"},
		{KeySomaxconn, u(backlog), "4096 per GiB of memory, from 4096 (kernel default) to 65535"},
		{KeyTCPMaxSynBacklog, u(tcpMaxSynBacklog(memBytes)), "as somaxconn: the SYN queue is also cut at the accept backlog"},
		{KeyNetdevMaxBacklog, u(netdevMaxBacklog(memBytes, cpus)), "all CPUs' queues full at 4 KiB a packet take at most 2 % of memory; 1000 to 65536"},
		{KeyRmemMax, u(buf), "1/256 of memory for one socket, from 4 MiB to 64 MiB"},
		{KeyWmemMax, u(buf), "1/256 of memory for one socket, from 4 MiB to 64 MiB"},
		{KeyTCPRmem, third, "max field only: 1/256 of memory, from 4 MiB to 64 MiB; min and default kept"},
		{KeyTCPWmem, third, "max field only: 1/256 of memory, from 4 MiB to 64 MiB; min and default kept"},
	}
}

// keySpec says how a key behaves in the kernel.
type keySpec struct {
	fields int // how many numbers the key holds
	// hostOnly: one value for the whole machine, read-only (mode 0444)
	// inside any network namespace but the host's.
	hostOnly bool
	// absentInNetns: a host-only key that a network namespace does not
	// see at all (net.core.netdev_max_backlog on recent kernels).
	absentInNetns bool
	// module: the kernel module that provides the key, if not built in.
	module string
}

func specOf(key string) keySpec {
	switch key {
	case KeyConntrackMax, KeyConntrackBuckets:
		return keySpec{fields: 1, hostOnly: true, module: "nf_conntrack"}
	case KeyNetdevMaxBacklog:
		return keySpec{fields: 1, hostOnly: true, absentInNetns: true}
	case KeyRmemMax, KeyWmemMax:
		return keySpec{fields: 1, hostOnly: true}
	case KeyTCPRmem, KeyTCPWmem:
		return keySpec{fields: 3}
	default:
		return keySpec{fields: 1}
	}
}

// parseValue reads a /proc/sys value: want unsigned decimal fields
// separated by white space.
func parseValue(s string, want int) ([]uint64, error) {
	f := strings.Fields(s)
	if len(f) != want {
		return nil, fmt.Errorf("%d fields in %q, want %d", len(f), s, want)
	}
	out := make([]uint64, len(f))
	for i, x := range f {
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("field %d of %q is not an unsigned number", i+1, s)
		}
		out[i] = v
	}
	return out, nil
}

// parseTarget reads a Target.Value: fields, "-" for "keep".
func parseTarget(s string) (fields []uint64, set []bool, err error) {
	f := strings.Fields(s)
	fields = make([]uint64, len(f))
	set = make([]bool, len(f))
	for i, x := range f {
		if x == keepField {
			continue
		}
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("target field %d of %q is not a number", i+1, s)
		}
		fields[i], set[i] = v, true
	}
	return fields, set, nil
}

func formatFields(v []uint64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, " ")
}

func roundDown(v, m uint64) uint64 { return v / m * m }
