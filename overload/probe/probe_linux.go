package probe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/overload"
)

// noteFirst is the note of a first reading, which has no deltas.
const noteFirst = "first reading: no deltas yet"

// Probe takes readings of the node it runs on, keeping the previous
// reading's counters for the next one's deltas. Its methods may be called
// from any goroutine; readings are taken one at a time. Close it when done.
type Probe struct {
	cfg Config
	fs  procfs.FS
	log *slog.Logger
	ns  *os.File // the network namespace to enter; nil for the caller's

	// listenRequest builds the inet_diag request; tests swap it for one the
	// kernel never answers.
	listenRequest func(family uint8) netlink.Message

	mu     sync.Mutex
	closed bool
	prev   *sample // counters of the previous reading; nil before the first
}

// sample holds the counters of one reading, for the next one's deltas.
type sample struct {
	mono    time.Time // time.Now of the reading, with its monotonic clock
	bootID  string
	netnsID string

	listenDrops   uint64
	hasListen     bool
	ctDrops       map[int]uint64 // per CPU
	ctDropsSource string
	links         map[string]linkSample // nil when the links could not be read
}

// New returns a Probe reading from cfg's roots and network namespace. It
// fails when ProcRoot is not a directory or NetNS is not a network
// namespace; sources that are missing later only degrade readings.
func New(cfg Config) (*Probe, error) {
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("probe: new: negative Timeout %v", cfg.Timeout)
	}
	for name, v := range cfg.LinkSpeedMbps {
		if v == 0 {
			return nil, fmt.Errorf("probe: new: LinkSpeedMbps[%q] is 0; leave the link out to mean unknown", name)
		}
	}
	cfg = cfg.withDefaults()
	pfs, err := procfs.NewFS(cfg.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("probe: new: proc root %s: %w", cfg.ProcRoot, err)
	}
	p := &Probe{cfg: cfg, fs: pfs, log: cfg.Logger, listenRequest: listenRequest}
	if cfg.NetNS != "" {
		f, err := os.Open(cfg.NetNS)
		if err != nil {
			return nil, fmt.Errorf("probe: new: network namespace: %w", err)
		}
		typ, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
		if err != nil || typ != unix.CLONE_NEWNET {
			_ = f.Close()
			if err == nil {
				err = errors.New("another kind of namespace")
			}
			return nil, fmt.Errorf("probe: new: %s is not a network namespace: %w", cfg.NetNS, err)
		}
		p.ns = f
	}
	return p, nil
}

// Close releases the network namespace handle. Read fails after Close.
func (p *Probe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if p.ns != nil {
		return p.ns.Close()
	}
	return nil
}

// Read takes one reading. Counters that only grow (conntrack drops, listen
// drops, link bytes) become deltas since the previous Read; the first Read
// has none and lists those inputs as missing. A source that cannot be
// read makes its input missing, with a note that says why; Read itself
// fails only when ctx ends, the Probe is closed, or ProcRoot cannot be
// read at all.
func (p *Probe) Read(ctx context.Context) (overload.Reading, error) {
	if err := ctx.Err(); err != nil {
		return overload.Reading{}, fmt.Errorf("probe: read: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return overload.Reading{}, fmt.Errorf("probe: read: %w", os.ErrClosed)
	}
	now := time.Now()
	r := overload.Reading{Version: overload.ReadingVersion, Node: p.cfg.Node, At: now}
	var acc accumulator

	mem, memErr := memoryUsedPercent(p.fs)
	load, loadErr := load15(p.fs)
	if memErr != nil && loadErr != nil {
		return overload.Reading{}, fmt.Errorf("probe: read: %s unreadable: %w", p.cfg.ProcRoot, errors.Join(memErr, loadErr))
	}
	if memErr != nil {
		acc.miss(overload.InputMemory, "memory: %v", memErr)
	} else {
		r.MemoryUsedPercent = mem
	}
	r.CPUs = cpus()
	if loadErr != nil {
		acc.miss(overload.InputLoad, "load: %v", loadErr)
	} else {
		r.Load15 = load
	}

	deadline := now.Add(p.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ns, err := p.inNetNS(ctx, func() netSample { return p.readNet(ctx, deadline) })
	if cerr := ctxDone(ctx); cerr != nil {
		return overload.Reading{}, fmt.Errorf("probe: read: %w", cerr)
	}
	if err != nil {
		for _, in := range []overload.Input{overload.InputConntrack, overload.InputConntrackDrops, overload.InputListenDrops, overload.InputBandwidth} {
			acc.miss(in, "")
		}
		acc.note("network namespace %s: %v", p.cfg.NetNS, err)
		r.Missing, r.Notes = acc.missing, acc.notes
		return r, nil
	}

	cur := &sample{mono: now, bootID: p.bootID(), netnsID: ns.netnsID}
	prev := p.prev
	first := prev == nil
	if !first && (prev.bootID != cur.bootID || prev.netnsID != cur.netnsID) {
		acc.note("the host rebooted or the network namespace was replaced since the previous reading: no deltas")
		prev = nil
	}
	if first {
		acc.note(noteFirst)
	}
	elapsed := now.Sub(p.prevMono()).Seconds()

	// Conntrack table.
	switch {
	case ns.ctErr != nil:
		acc.miss(overload.InputConntrack, "conntrack: %v", ns.ctErr)
		acc.miss(overload.InputConntrackDrops, "")
	default:
		r.ConntrackEntries, r.ConntrackMax = ns.ctCount, ns.ctMax
		if ns.ctDropsNote != "" {
			acc.note("%s", ns.ctDropsNote)
		}
		if ns.ctDropsErr != nil {
			acc.miss(overload.InputConntrackDrops, "conntrack drops: %v", ns.ctDropsErr)
			break
		}
		cur.ctDrops, cur.ctDropsSource = ns.ctDrops, ns.ctDropsSource
		switch {
		case prev == nil:
			acc.miss(overload.InputConntrackDrops, "")
		case prev.ctDrops == nil || prev.ctDropsSource != cur.ctDropsSource:
			acc.miss(overload.InputConntrackDrops, "conntrack drops: no previous count from %s: no delta this reading", cur.ctDropsSource)
		default:
			d, ok := perCPUDelta(prev.ctDrops, cur.ctDrops)
			if !ok {
				acc.miss(overload.InputConntrackDrops, "conntrack drops: a per-CPU counter went back (wrap, module reload): no delta this reading")
				break
			}
			r.ConntrackDrops = d
		}
	}

	// Listen queues.
	if ns.diagErr != nil {
		acc.note("listeners: %v", ns.diagErr)
	}
	if ns.listenersSeen > len(ns.listeners) {
		acc.note("listeners: the %d fullest of %d shown", len(ns.listeners), ns.listenersSeen)
	}
	r.Listeners = ns.listeners
	switch {
	case ns.netstatErr != nil:
		acc.miss(overload.InputListenDrops, "listen drops: %v", ns.netstatErr)
	default:
		cur.listenDrops, cur.hasListen = ns.listenDrops, true
		switch {
		case prev == nil:
			acc.miss(overload.InputListenDrops, "")
		case !prev.hasListen:
			acc.miss(overload.InputListenDrops, "listen drops: no previous count: no delta this reading")
		case cur.listenDrops < prev.listenDrops:
			acc.miss(overload.InputListenDrops, "listen drops: TcpExt ListenDrops went back (reset): no delta this reading")
		default:
			r.ListenDrops = cur.listenDrops - prev.listenDrops
		}
	}

	// Links.
	if ns.linksErr != nil {
		acc.miss(overload.InputBandwidth, "bandwidth: %v", ns.linksErr)
	} else {
		cur.links = make(map[string]linkSample)
		checkable := 0
		for _, l := range ns.links {
			if !l.counted() {
				continue
			}
			cur.links[l.name] = l
			if prev == nil {
				continue
			}
			pl, ok := prev.links[l.name]
			switch {
			case !ok: // also when the previous reading had no links at all
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
				Name:            l.name,
				RxBitsPerSecond: float64(l.rxBytes-pl.rxBytes) * 8 / elapsed,
				TxBitsPerSecond: float64(l.txBytes-pl.txBytes) * 8 / elapsed,
			}
			if v, ok := p.cfg.LinkSpeedMbps[l.name]; ok {
				link.SpeedMbps = v
			} else {
				var why string
				link.SpeedMbps, why = linkSpeed(p.cfg.SysRoot, l)
				if link.SpeedMbps == 0 {
					acc.note("link %s: speed unknown, %s; its bandwidth check is skipped (an operator can give it in LinkSpeedMbps)", l.name, why)
				}
			}
			if link.SpeedMbps > 0 {
				checkable++
			}
			r.Links = append(r.Links, link)
		}
		switch {
		case prev == nil:
			acc.miss(overload.InputBandwidth, "")
		case checkable == 0 && len(cur.links) == 0:
			acc.miss(overload.InputBandwidth, "bandwidth: no link is up besides loopback")
		case checkable == 0:
			acc.miss(overload.InputBandwidth, "bandwidth: no link has both a rate and a known speed")
		}
	}

	p.prev = cur
	r.Missing, r.Notes = acc.missing, acc.notes
	if len(r.Missing) > 0 {
		p.log.Debug("reading with inputs missing", "missing", r.Missing, "notes", r.Notes)
	}
	return r, nil
}

// ctxDone returns ctx's error, or context.DeadlineExceeded once ctx's
// deadline has passed even if its timer has not fired yet: a netlink
// request that ran into the context's deadline fails the reading, as the
// context would a moment later.
func ctxDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// prevMono returns the time of the previous reading, or the zero time.
func (p *Probe) prevMono() time.Time {
	if p.prev == nil {
		return time.Time{}
	}
	return p.prev.mono
}

// bootID identifies the running kernel; "" when unknown.
func (p *Probe) bootID() string {
	b, err := os.ReadFile(filepath.Join(p.cfg.ProcRoot, "sys", "kernel", "random", "boot_id"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// perCPUDelta returns the growth of the sum of per-CPU counters, and false
// when any CPU's counter went back or the CPU set changed.
func perCPUDelta(prev, cur map[int]uint64) (uint64, bool) {
	if len(prev) != len(cur) {
		return 0, false
	}
	var d uint64
	for cpu, v := range cur {
		pv, ok := prev[cpu]
		if !ok || v < pv {
			return 0, false
		}
		d += v - pv
	}
	return d, true
}

// cpus returns how many CPUs this process may run on.
func cpus() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return runtime.NumCPU()
	}
	if n := set.Count(); n > 0 {
		return n
	}
	return runtime.NumCPU()
}

// accumulator gathers the missing inputs and the notes of a reading.
type accumulator struct {
	missing []overload.Input
	notes   []string
}

// miss marks in missing and, when format is not empty, adds a note.
func (a *accumulator) miss(in overload.Input, format string, args ...any) {
	if !slices.Contains(a.missing, in) {
		a.missing = append(a.missing, in)
	}
	if format != "" {
		a.note(format, args...)
	}
}

func (a *accumulator) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	if !slices.Contains(a.notes, n) {
		a.notes = append(a.notes, n)
	}
}

// netSample is what one reading found in the network namespace.
type netSample struct {
	netnsID string

	ctCount, ctMax uint64
	ctErr          error
	ctDrops        map[int]uint64
	ctDropsSource  string
	ctDropsErr     error
	ctDropsNote    string

	listenDrops   uint64
	netstatErr    error
	listeners     []overload.Listener
	listenersSeen int
	diagErr       error

	links    []linkSample
	linksErr error
}

// inNetNS runs fn on a goroutine locked to an OS thread that has entered
// the Probe's network namespace, so that netlink sockets opened and
// /proc/thread-self/net and /proc/sys/net files read there are that
// namespace's. A thread that entered another namespace is never given
// back to the runtime: it ends with the goroutine. inNetNS returns when fn
// does, or when ctx ends (fn then finishes on its own, bounded by its
// netlink deadlines).
func (p *Probe) inNetNS(ctx context.Context, fn func() netSample) (netSample, error) {
	type result struct {
		ns  netSample
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if p.ns != nil {
			if err := unix.Setns(int(p.ns.Fd()), unix.CLONE_NEWNET); err != nil {
				runtime.UnlockOSThread()
				if permissionDenied(err) {
					err = fmt.Errorf("enter: %w (entering a namespace needs CAP_SYS_ADMIN)", err)
				} else {
					err = fmt.Errorf("enter: %w", err)
				}
				done <- result{err: err}
				return
			}
			// Stay locked: the thread exits with this goroutine.
		} else {
			defer runtime.UnlockOSThread()
		}
		done <- result{ns: fn()}
	}()
	select {
	case res := <-done:
		return res.ns, res.err
	case <-ctx.Done():
		return netSample{}, ctx.Err()
	}
}

// readNet reads the network sources; it runs on a thread inside the
// namespace (see inNetNS).
func (p *Probe) readNet(ctx context.Context, deadline time.Time) netSample {
	var ns netSample
	// The thread's own proc directory holds the namespace's net files.
	self, selfErr := p.threadSelf()
	if selfErr == nil {
		if link, err := os.Readlink(filepath.Join(p.cfg.ProcRoot, self, "ns", "net")); err == nil {
			ns.netnsID = link
		}
	}

	// Conntrack: count and max are sysctls of the opener's namespace.
	dir := filepath.Join(p.cfg.ProcRoot, "sys", "net", "netfilter")
	ns.ctCount, ns.ctErr = readUint(filepath.Join(dir, "nf_conntrack_count"))
	if ns.ctErr == nil {
		ns.ctMax, ns.ctErr = readUint(filepath.Join(dir, "nf_conntrack_max"))
	}
	if ns.ctErr == nil && ns.ctMax == 0 {
		ns.ctErr = fmt.Errorf("nf_conntrack_max is 0: %w", errMalformed)
	}
	if errors.Is(ns.ctErr, fs.ErrNotExist) {
		ns.ctErr = fmt.Errorf("no conntrack in this kernel (module nf_conntrack not loaded): %w", ns.ctErr)
	}
	if ns.ctErr == nil {
		// Drops: ctnetlink first, /proc/net/stat/nf_conntrack when it fails
		// (no CAP_NET_ADMIN, no nf_conntrack_netlink).
		drops, err := conntrackDrops(ctx, deadline)
		if err == nil {
			ns.ctDrops, ns.ctDropsSource = drops, "ctnetlink"
		} else if ctxDone(ctx) == nil {
			why := err.Error()
			if permissionDenied(err) {
				why = "no CAP_NET_ADMIN (" + why + ")"
			}
			drops, ferr := map[int]uint64(nil), selfErr
			if ferr == nil {
				drops, ferr = p.conntrackStatFile(filepath.Join(p.cfg.ProcRoot, self, "net", "stat", "nf_conntrack"))
			}
			if ferr != nil {
				ns.ctDropsErr = fmt.Errorf("%s; %w", why, ferr)
			} else {
				ns.ctDrops, ns.ctDropsSource = drops, "procfs"
				ns.ctDropsNote = "conntrack drops read from /proc/net/stat/nf_conntrack: " + why
			}
		} else {
			ns.ctDropsErr = err
		}
	}

	// Listen queues.
	ns.netstatErr = selfErr
	if ns.netstatErr == nil {
		var proc procfs.Proc
		proc, ns.netstatErr = p.threadProc(self)
		if ns.netstatErr == nil {
			var overflows uint64
			overflows, ns.listenDrops, ns.netstatErr = listenCounters(proc)
			p.log.Debug("listen counters", "overflows", overflows, "drops", ns.listenDrops)
		}
	}
	if ctxDone(ctx) == nil {
		ns.listeners, ns.listenersSeen, ns.diagErr = listeners(ctx, deadline, p.listenRequest)
	}
	if ctxDone(ctx) == nil {
		ns.links, ns.linksErr = links(ctx, deadline)
	}
	return ns
}

// threadSelf returns the calling thread's directory relative to ProcRoot,
// "PID/task/TID", resolved by the proc mount itself so that it holds in a
// container whose PID namespace differs from the mount's.
func (p *Probe) threadSelf() (string, error) {
	link, err := os.Readlink(filepath.Join(p.cfg.ProcRoot, "thread-self"))
	if err != nil {
		return "", fmt.Errorf("this thread's proc entry: %w", err)
	}
	return link, nil
}

// threadProc returns a procfs.Proc for "PID/task/TID".
func (p *Probe) threadProc(self string) (procfs.Proc, error) {
	pidStr, tidStr, ok := strings.Cut(self, "/task/")
	pid, err1 := strconv.Atoi(pidStr)
	tid, err2 := strconv.Atoi(tidStr)
	if !ok || err1 != nil || err2 != nil {
		return procfs.Proc{}, fmt.Errorf("thread-self points at %q, not PID/task/TID: %w", self, errMalformed)
	}
	return p.fs.Thread(pid, tid)
}

// conntrackStatFile reads /proc/net/stat/nf_conntrack as per-CPU drops.
func (p *Probe) conntrackStatFile(path string) (map[int]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sums, err := parseConntrackStat(f)
	if err != nil {
		return nil, err
	}
	out := make(map[int]uint64, len(sums))
	for i, s := range sums {
		out[i] = s
	}
	return out, nil
}
