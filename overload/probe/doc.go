// Package probe takes readings of a Linux node for the overload checks:
// memory used, the 15-minute load average against the CPUs, the kernel's
// connection (conntrack) table and the connections it dropped when full,
// connections dropped by full listen queues, and bandwidth against link
// speed. One Read returns one [overload.Reading].
//
// A reading is only as good as its probe, and on a busy exit node a probe
// that dumps sockets or the conntrack table costs more than the overload it
// measures. So every source here costs the same with no connections or
// 100,000: memory and load from procfs; the conntrack count and max from
// /proc/sys/net/netfilter; drops from ctnetlink's per-CPU statistics (or
// /proc/net/stat/nf_conntrack), never a table dump; listen drops from the
// TcpExt counters, and the per-listener picture from an inet_diag request
// for LISTEN sockets only; link bytes from one rtnetlink link dump. Every
// netlink request has a deadline.
//
// What fills each field of the Reading:
//
//   - MemoryUsedPercent: (MemTotal − MemAvailable) / MemTotal from meminfo.
//   - Load15 from loadavg; CPUs: the CPUs this process may run on (its
//     affinity mask), not the machine's count.
//   - ConntrackEntries, ConntrackMax: nf_conntrack_count (of the namespace)
//     and nf_conntrack_max (global).
//   - ConntrackDrops: Drop + EarlyDrop + InsertFailed summed over CPUs.
//   - ListenDrops: TcpExt ListenDrops, which counts every connection
//     dropped at a listener: each accept-queue overflow (ListenOverflows)
//     and the SYN-queue drops that ListenOverflows leaves out.
//   - Listeners: each TCP listener's accept queue and backlog (at most the
//     1,024 fullest), for information.
//   - Links: bits per second each way for links that are up and running,
//     loopback left out; the speed from SysRoot/class/net/IF/speed or
//     Config.LinkSpeedMbps, 0 when unknown (with a note). ReadLinkBytes
//     gives with the reading the bytes each link moved, the growth of the
//     kernel's own counters the rates were made from.
//
// Counters that only grow in the kernel become deltas between readings.
// The first reading has none and says so; a counter that went back (a
// reboot, a wrap, a module reload, a replaced link or namespace) gives no
// delta for that reading, never a huge or negative one. A source that
// cannot be read makes its input missing, with a note saying why, so a
// probe without CAP_NET_ADMIN still reads everything procfs has.
//
// Read never waits past its context's deadline. Every file is opened
// without blocking and refused, with an error naming its path, unless it
// is a regular file: a FIFO or a device left in a -proc or -sys tree
// makes its input missing instead of hanging the reading.
//
// Inside, a reading is two steps: each input's source reads raw values
// and counters into a sample, then a pure step turns the previous sample
// and the current one into the Reading. The sources are one table
// (sources_linux.go), one entry per [overload.Input].
//
//	p, err := probe.New(probe.Config{Node: "exit-fra-1"})
//	if err != nil {
//		return err
//	}
//	defer p.Close()
//	for range time.Tick(30 * time.Second) {
//		r, err := p.Read(ctx)
//		if err != nil {
//			return err
//		}
//		report(r) // r.Missing and r.Notes say what could not be measured
//	}
//
// Off Linux, New returns an error wrapping errors.ErrUnsupported.
package probe
