package probe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/prometheus/procfs"

	"github.com/proofkit/nodekit/internal/procfile"
	"github.com/proofkit/nodekit/overload"
)

// A source is the probe's side of one input: read puts the raw values
// and counters into a sample, fill turns the previous sample (nil for a
// first reading, or after a reboot) and the current one into the
// reading's fields, or marks the input missing with a note. read does the
// I/O; fill is pure.
type source struct {
	input overload.Input
	// net: read inside the network namespace (Config.NetNS), after every
	// source without it.
	net  bool
	read func(ctx context.Context, p *Probe, env *readEnv, s *sample)
	fill func(prev, cur *sample, r *overload.Reading, acc *accumulator)
}

// sources lists one source per input, in the order a reading takes them
// (conntrack drops are read only when the conntrack table was). A new
// input is one entry here, with its fields in sample.
var sources = [...]source{
	{overload.InputMemory, false, readMemory, fillMemory},
	{overload.InputLoad, false, readLoad, fillLoad},
	{overload.InputConntrack, true, readConntrack, fillConntrack},
	{overload.InputConntrackDrops, true, readConntrackDrops, fillConntrackDrops},
	{overload.InputListenDrops, true, readListen, fillListen},
	{overload.InputBandwidth, true, readLinks, fillBandwidth},
}

// Memory: (MemTotal − MemAvailable) / MemTotal from meminfo.

func readMemory(ctx context.Context, p *Probe, _ *readEnv, s *sample) {
	if s.memoryErr = procfile.Check(ctx, filepath.Join(p.cfg.ProcRoot, "meminfo")); s.memoryErr != nil {
		s.memoryErr = fmt.Errorf("meminfo: %w", s.memoryErr)
		return
	}
	s.memory, s.memoryErr = memoryUsedPercent(p.fs)
}

func fillMemory(_, cur *sample, r *overload.Reading, acc *accumulator) {
	if cur.memoryErr != nil {
		acc.miss(overload.InputMemory, "memory: %v", cur.memoryErr)
		return
	}
	r.MemoryUsedPercent = cur.memory
}

// Load: the 15-minute load average from loadavg, and the CPUs this
// process may run on.

func readLoad(ctx context.Context, p *Probe, _ *readEnv, s *sample) {
	s.cpus = cpus()
	if s.loadErr = procfile.Check(ctx, filepath.Join(p.cfg.ProcRoot, "loadavg")); s.loadErr != nil {
		s.loadErr = fmt.Errorf("loadavg: %w", s.loadErr)
		return
	}
	s.load15, s.loadErr = load15(p.fs)
}

func fillLoad(_, cur *sample, r *overload.Reading, acc *accumulator) {
	r.CPUs = cur.cpus
	if cur.loadErr != nil {
		acc.miss(overload.InputLoad, "load: %v", cur.loadErr)
		return
	}
	r.Load15 = cur.load15
}

// Conntrack: the table's count and max, sysctls of the opener's namespace.

func readConntrack(ctx context.Context, p *Probe, _ *readEnv, s *sample) {
	dir := filepath.Join(p.cfg.ProcRoot, "sys", "net", "netfilter")
	s.ctCount, s.ctErr = readUint(ctx, filepath.Join(dir, "nf_conntrack_count"))
	if s.ctErr == nil {
		s.ctMax, s.ctErr = readUint(ctx, filepath.Join(dir, "nf_conntrack_max"))
	}
	if s.ctErr == nil && s.ctMax == 0 {
		s.ctErr = fmt.Errorf("nf_conntrack_max is 0: %w", errMalformed)
	}
	if errors.Is(s.ctErr, fs.ErrNotExist) {
		s.ctErr = fmt.Errorf("no conntrack in this kernel (module nf_conntrack not loaded): %w", s.ctErr)
	}
}

func fillConntrack(_, cur *sample, r *overload.Reading, acc *accumulator) {
	if cur.ctErr != nil {
		acc.miss(overload.InputConntrack, "conntrack: %v", cur.ctErr)
		return
	}
	r.ConntrackEntries, r.ConntrackMax = cur.ctCount, cur.ctMax
}

// Conntrack drops: Drop + EarlyDrop + InsertFailed per CPU, from
// ctnetlink, or /proc/net/stat/nf_conntrack when ctnetlink fails (no
// CAP_NET_ADMIN, no nf_conntrack_netlink).

func readConntrackDrops(ctx context.Context, p *Probe, env *readEnv, s *sample) {
	if s.ctErr != nil {
		return // no table, no drops
	}
	drops, err := conntrackDrops(ctx, env.deadline)
	if err == nil {
		s.ctDrops, s.ctDropsSource = drops, "ctnetlink"
		return
	}
	if ctxDone(ctx) != nil {
		s.ctDropsErr = err
		return
	}
	why := err.Error()
	if permissionDenied(err) {
		why = "no CAP_NET_ADMIN (" + why + ")"
	}
	drops, ferr := map[int]uint64(nil), env.selfErr
	if ferr == nil {
		drops, ferr = conntrackStatFile(ctx, filepath.Join(p.cfg.ProcRoot, env.self, "net", "stat", "nf_conntrack"))
	}
	if ferr != nil {
		s.ctDropsErr = fmt.Errorf("%s; %w", why, ferr)
		return
	}
	s.ctDrops, s.ctDropsSource = drops, "procfs"
	s.ctDropsNote = "conntrack drops read from /proc/net/stat/nf_conntrack: " + why
}

func fillConntrackDrops(prev, cur *sample, r *overload.Reading, acc *accumulator) {
	const in = overload.InputConntrackDrops
	switch {
	case cur.ctErr != nil:
		acc.miss(in, "") // the conntrack input's note says why
		return
	case cur.ctDropsNote != "":
		acc.note("%s", cur.ctDropsNote)
	}
	switch {
	case cur.ctDropsErr != nil:
		acc.miss(in, "conntrack drops: %v", cur.ctDropsErr)
	case prev == nil:
		acc.miss(in, "")
	case prev.ctDrops == nil || prev.ctDropsSource != cur.ctDropsSource:
		acc.miss(in, "conntrack drops: no previous count from %s: no delta this reading", cur.ctDropsSource)
	default:
		d, ok := perCPUDelta(prev.ctDrops, cur.ctDrops)
		if !ok {
			acc.miss(in, "conntrack drops: a per-CPU counter went back (wrap, module reload): no delta this reading")
			return
		}
		r.ConntrackDrops = d
	}
}

// Listen drops: TcpExt ListenDrops from the thread's net/netstat; and,
// for information, the listeners' accept queues from inet_diag.

func readListen(ctx context.Context, p *Probe, env *readEnv, s *sample) {
	s.listenErr = env.selfErr
	if s.listenErr == nil {
		s.listenErr = procfile.Check(ctx, filepath.Join(p.cfg.ProcRoot, env.self, "net", "netstat"))
		if s.listenErr != nil {
			s.listenErr = fmt.Errorf("netstat: %w", s.listenErr)
		}
	}
	if s.listenErr == nil {
		var proc procfs.Proc
		proc, s.listenErr = p.threadProc(env.self)
		if s.listenErr == nil {
			var overflows uint64
			overflows, s.listenDrops, s.listenErr = listenCounters(proc)
			p.cfg.Logger.Debug("listen counters", "overflows", overflows, "drops", s.listenDrops)
		}
	}
	if ctxDone(ctx) == nil {
		s.listeners, s.listenersSeen, s.diagErr = listeners(ctx, env.deadline, p.dial, p.listenRequest)
	}
}

func fillListen(prev, cur *sample, r *overload.Reading, acc *accumulator) {
	const in = overload.InputListenDrops
	if cur.diagErr != nil {
		acc.note("listeners: %v", cur.diagErr)
	}
	if cur.listenersSeen > len(cur.listeners) {
		acc.note("listeners: the %d fullest of %d shown", len(cur.listeners), cur.listenersSeen)
	}
	r.Listeners = cur.listeners
	switch {
	case cur.listenErr != nil:
		acc.miss(in, "listen drops: %v", cur.listenErr)
	case prev == nil:
		acc.miss(in, "")
	case prev.listenErr != nil:
		acc.miss(in, "listen drops: no previous count: no delta this reading")
	case cur.listenDrops < prev.listenDrops:
		acc.miss(in, "listen drops: TcpExt ListenDrops went back (reset): no delta this reading")
	default:
		r.ListenDrops = cur.listenDrops - prev.listenDrops
	}
}

// Bandwidth: each link's byte counters from an rtnetlink dump, and its
// speed from Config.LinkSpeedMbps or sysfs.

// defaultSpeedHint ends the note of a link of unknown speed when
// Config.LinkSpeedHint is "".
const defaultSpeedHint = "an operator can give it in LinkSpeedMbps"

// speedHint is the end of the note of a link whose speed is unknown.
func speedHint(hint string) string {
	if hint == "" {
		return defaultSpeedHint
	}
	return hint
}

func readLinks(ctx context.Context, p *Probe, env *readEnv, s *sample) {
	all, err := links(ctx, env.deadline, p.dial)
	if err != nil {
		s.linksErr = err
		return
	}
	s.speedHint = p.cfg.LinkSpeedHint
	for _, l := range all {
		if !l.counted() {
			continue
		}
		// Given by the kernel's name, or by the one readings show.
		if v, ok := p.cfg.LinkSpeedMbps[l.name]; ok {
			l.speedMbps = v
		} else if v, ok := p.cfg.LinkSpeedMbps[LinkName(l.name)]; ok {
			l.speedMbps = v
		} else {
			l.speedMbps, l.speedWhy = linkSpeed(ctx, p.cfg.SysRoot, l)
		}
		s.links = append(s.links, l)
	}
}

func fillBandwidth(prev, cur *sample, r *overload.Reading, acc *accumulator) {
	const in = overload.InputBandwidth
	if cur.linksErr != nil {
		acc.miss(in, "bandwidth: %v", cur.linksErr)
		return
	}
	var before map[string]linkSample
	var elapsed float64
	if prev != nil {
		before = make(map[string]linkSample, len(prev.links))
		for _, l := range prev.links { // none when prev could not dump them
			before[l.name] = l
		}
		elapsed = cur.mono.Sub(prev.mono).Seconds()
	}
	checkable := 0
	for _, l := range cur.links {
		if prev == nil {
			continue
		}
		pl, ok := before[l.name]
		switch {
		case !ok:
			acc.note("link %s: new since the previous reading: no rate yet", l.name)
			continue
		case pl.index != l.index:
			acc.note("link %s: replaced since the previous reading (index %d, was %d): no rate this reading", l.name, l.index, pl.index)
			continue
		case l.rxBytes < pl.rxBytes || l.txBytes < pl.txBytes:
			acc.note("link %s: byte counters went back (reset): no rate this reading", l.name)
			continue
		case elapsed <= 0:
			continue
		}
		link := overload.Link{
			Name:            LinkName(l.name),
			RxBitsPerSecond: float64(l.rxBytes-pl.rxBytes) * 8 / elapsed,
			TxBitsPerSecond: float64(l.txBytes-pl.txBytes) * 8 / elapsed,
			SpeedMbps:       l.speedMbps,
		}
		if link.SpeedMbps == 0 {
			acc.note("link %s: speed unknown, %s; its bandwidth check is skipped (%s)", l.name, l.speedWhy, speedHint(cur.speedHint))
		} else {
			checkable++
		}
		r.Links = append(r.Links, link)
		acc.moved = append(acc.moved, LinkBytes{Name: link.Name, RxBytes: l.rxBytes - pl.rxBytes, TxBytes: l.txBytes - pl.txBytes})
	}
	switch {
	case prev == nil:
		acc.miss(in, "")
	case checkable == 0 && len(cur.links) == 0:
		acc.miss(in, "bandwidth: no link is up besides loopback")
	case checkable == 0:
		acc.miss(in, "bandwidth: no link has both a rate and a known speed")
	}
}
