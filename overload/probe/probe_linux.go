package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mdlayher/netlink"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/overload"
)

// noteFirst is the note of a first reading, which has no deltas.
const noteFirst = "first reading: no deltas yet"

// state is the Linux part of a Probe.
type state struct {
	fs procfs.FS
	ns *os.File // the network namespace to enter; nil for the caller's

	// listenRequest builds the inet_diag request; tests swap it for one the
	// kernel never answers.
	listenRequest func(family uint8) netlink.Message
	// dial opens the inet_diag and rtnetlink sockets; tests swap it for
	// connections from nltest.
	dial func(family int) (netlinkConn, error)

	prev *sample // the previous reading's sample; nil before the first

	// blocked lists the readings whose context ended while a step still
	// blocked (a file on a hung FUSE mount that never answers a read).
	// Their goroutines end on their own, if ever; until then later
	// readings skip that step, so a hang costs one goroutine, not one a
	// reading.
	blocked []blockedTake
}

// skip records that source i was not read, and why.
func (s *sample) skip(i int, err error) {
	if s.skipped == nil {
		s.skipped = map[int]error{}
	}
	s.skipped[i] = err
}

// blockedTake is a reading whose goroutine was still in step when its
// context ended.
type blockedTake struct {
	step  int // an index of sources, or stepBoot or stepSelf
	since time.Time
	done  <-chan *sample // receives when the goroutine ends
}

// The steps of a reading besides its sources.
const (
	stepBoot = -1           // the boot id
	stepSelf = len(sources) // this thread's proc entry and namespace
)

// maxBlocked bounds the blocked readings a Probe keeps before Read fails
// at once: one per step, which is as many as skipping can leave.
const maxBlocked = len(sources) + 2

// stepName names a step for a note.
func stepName(step int) string {
	switch {
	case step == stepBoot:
		return "the boot id"
	case step == stepSelf:
		return "this thread's proc entry"
	case step >= 0 && step < len(sources):
		return string(sources[step].input)
	}
	return fmt.Sprintf("step %d", step)
}

// unsupported is nil on Linux.
func unsupported(string) error { return nil }

// open sets up the Linux part of a Probe from p.cfg.
func (p *Probe) open() error {
	pfs, err := procfs.NewFS(p.cfg.ProcRoot)
	if err != nil {
		return fmt.Errorf("proc root %s: %w", p.cfg.ProcRoot, err)
	}
	p.fs, p.listenRequest, p.dial = pfs, listenRequest, dialNetlink
	if p.cfg.NetNS == "" {
		return nil
	}
	f, err := os.Open(p.cfg.NetNS)
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	typ, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil || typ != unix.CLONE_NEWNET {
		_ = f.Close()
		if err == nil {
			err = errors.New("another kind of namespace")
		}
		return fmt.Errorf("%s is not a network namespace: %w", p.cfg.NetNS, err)
	}
	p.ns = f
	return nil
}

func (p *Probe) close() error {
	if p.ns != nil {
		return p.ns.Close()
	}
	return nil
}

// read takes a sample of the raw counters, then turns it and the previous
// one into a reading.
func (p *Probe) read(ctx context.Context) (overload.Reading, []LinkBytes, error) {
	cur, err := p.take(ctx)
	if err != nil {
		return overload.Reading{}, nil, err
	}
	if cur.memoryErr != nil && cur.loadErr != nil {
		return overload.Reading{}, nil, fmt.Errorf("%s unreadable: %w", p.cfg.ProcRoot, errors.Join(cur.memoryErr, cur.loadErr))
	}
	r, moved := deltas(p.prev, cur)
	r.Version, r.Node, r.At = overload.ReadingVersion, p.cfg.Node, cur.mono
	if cur.netErr == nil {
		p.prev = cur
	}
	if len(r.Missing) > 0 {
		p.cfg.Logger.Debug("reading with inputs missing", "missing", r.Missing, "notes", r.Notes)
	}
	return r, moved, nil
}

// sample holds what one reading found, before any delta: values, raw
// counters that only grow, and the error of each source that failed.
// Each source (see sources) fills its own fields.
type sample struct {
	mono    time.Time // time.Now of the reading, with its monotonic clock
	bootID  string    // the running kernel; "" when unknown
	netnsID string    // the network namespace read, as its ns/net link
	netErr  error     // the namespace could not be entered: no network field is set

	// skipped holds, by sources index, why a source was not read: an
	// earlier reading is still blocked in it. Its fields are unset.
	skipped map[int]error

	memory    float64 // InputMemory
	memoryErr error

	load15  float64 // InputLoad
	cpus    int
	loadErr error

	ctCount, ctMax uint64 // InputConntrack
	ctErr          error

	ctDrops       map[int]uint64 // InputConntrackDrops, per CPU
	ctDropsSource string         // "ctnetlink" or "procfs"
	ctDropsNote   string         // why the fallback source was used
	ctDropsErr    error

	listenDrops   uint64 // InputListenDrops
	listenErr     error
	listeners     []overload.Listener // the fullest, for information
	listenersSeen int
	diagErr       error

	links     []linkSample // InputBandwidth: links up and running, loopback left out
	linksErr  error
	speedHint string // Config.LinkSpeedHint, for the note of a link of unknown speed
}

// readEnv is what the sources of one reading share.
type readEnv struct {
	deadline time.Time // of every netlink request
	self     string    // "PID/task/TID" of the reading thread, relative to ProcRoot
	selfErr  error
}

// take reads every source into a fresh sample, on a goroutine locked to an
// OS thread that has entered the Probe's network namespace (after the
// sources outside it), so that netlink sockets opened and
// /proc/thread-self/net and /proc/sys/net files read there are that
// namespace's. A thread that entered another namespace is never given back
// to the runtime: it ends with the goroutine. take returns when the
// sources are read, or when ctx ends: whatever blocks (a netlink socket, a
// file on a hung FUSE mount) then finishes on its own, bounded by the
// netlink deadlines, and its sample is thrown away.
//
// A step (a source, the boot id, the thread's proc entry) that an earlier
// reading is still blocked in is skipped, its input missing with a note
// that says so, until that reading's goroutine ends (see state.blocked).
func (p *Probe) take(ctx context.Context) (*sample, error) {
	now := time.Now()
	env := readEnv{deadline: now.Add(p.cfg.Timeout)}
	if d, ok := ctx.Deadline(); ok && d.Before(env.deadline) {
		env.deadline = d
	}
	p.blocked = slices.DeleteFunc(p.blocked, func(b blockedTake) bool {
		select {
		case <-b.done:
			return true
		default:
			return false
		}
	})
	if len(p.blocked) >= maxBlocked {
		var in []string
		for _, b := range p.blocked {
			in = append(in, fmt.Sprintf("%s since %s", stepName(b.step), b.since.Format(time.RFC3339)))
		}
		return nil, fmt.Errorf("%d earlier readings are still blocked (%s): a file or socket under %s does not answer",
			len(p.blocked), strings.Join(in, "; "), p.cfg.ProcRoot)
	}
	var skip map[int]error // by step; nil, and no allocation, when nothing is blocked
	for _, b := range p.blocked {
		if skip == nil {
			skip = map[int]error{}
		}
		skip[b.step] = fmt.Errorf("%s: not read: a reading at %s is still blocked reading it (a file or socket that does not answer)",
			stepName(b.step), b.since.Format(time.RFC3339))
	}
	prevBoot := ""
	if p.prev != nil {
		prevBoot = p.prev.bootID
	}
	var step atomic.Int64
	done := make(chan *sample, 1)
	go func() {
		s := &sample{mono: now}
		defer func() { done <- s }()
		runtime.LockOSThread()
		locked := true
		defer func() {
			if locked {
				runtime.UnlockOSThread()
			}
		}()
		step.Store(int64(stepBoot))
		if skip[stepBoot] != nil {
			s.bootID = prevBoot // unknown: taken as unchanged rather than as a reboot
		} else {
			s.bootID = p.bootID(ctx)
		}
		for i, src := range sources {
			if !src.net {
				if err := skip[i]; err != nil {
					s.skip(i, err)
				} else {
					step.Store(int64(i))
					src.read(ctx, p, &env, s)
				}
			}
		}
		if p.ns != nil {
			if err := unix.Setns(int(p.ns.Fd()), unix.CLONE_NEWNET); err != nil {
				if permissionDenied(err) {
					err = fmt.Errorf("enter: %w (entering a namespace needs CAP_SYS_ADMIN)", err)
				} else {
					err = fmt.Errorf("enter: %w", err)
				}
				s.netErr = fmt.Errorf("network namespace %s: %w", p.cfg.NetNS, err)
				return
			}
			locked = false // stay locked: the thread exits with this goroutine
		}
		step.Store(int64(stepSelf))
		if env.selfErr = skip[stepSelf]; env.selfErr == nil {
			env.self, env.selfErr = p.threadSelf()
		}
		if env.selfErr == nil {
			if link, err := os.Readlink(filepath.Join(p.cfg.ProcRoot, env.self, "ns", "net")); err == nil {
				s.netnsID = link
			}
		}
		for i, src := range sources {
			if src.net && ctxDone(ctx) == nil {
				if err := skip[i]; err != nil {
					s.skip(i, err)
				} else {
					step.Store(int64(i))
					src.read(ctx, p, &env, s)
				}
			}
		}
	}()
	select {
	case s := <-done:
		if err := ctxDone(ctx); err != nil {
			return nil, err
		}
		return s, nil
	case <-ctx.Done():
		p.blocked = append(p.blocked, blockedTake{step: int(step.Load()), since: now, done: done})
		return nil, ctx.Err()
	}
}

// deltas turns the current sample and the previous one (nil for a first
// reading) into a reading: values as found, counters as their growth since
// prev, and the inputs that cannot be given missing, each with a note.
// It does no I/O and leaves the reading's Version, Node and At unset.
// With the reading it returns the bytes each of its Links moved: the same
// counters' growth the link's rate was made from, one for each link.
//
// A reboot or a replaced network namespace since prev gives no delta; so
// does a counter that went back, a link that is new or replaced, and a
// source that could not be read in either sample.
func deltas(prev, cur *sample) (overload.Reading, []LinkBytes) {
	var r overload.Reading
	var acc accumulator
	for i, src := range sources {
		if !src.net {
			fill(i, prev, cur, &r, &acc)
		}
	}
	if cur.netErr != nil {
		for _, src := range sources {
			if src.net {
				acc.miss(src.input, "")
			}
		}
		acc.note("%v", cur.netErr)
		r.Missing, r.Notes = acc.missing, acc.notes
		return r, nil
	}
	base := prev
	if prev != nil && (prev.bootID != cur.bootID || prev.netnsID != cur.netnsID) {
		acc.note("the host rebooted or the network namespace was replaced since the previous reading: no deltas")
		base = nil
	}
	if prev == nil {
		acc.note(noteFirst)
	}
	for i, src := range sources {
		if src.net {
			fill(i, base, cur, &r, &acc)
		}
	}
	r.Missing, r.Notes = acc.missing, acc.notes
	return r, acc.moved
}

// fill fills in source i's part of r from cur and prev: missing, with
// why, when cur skipped it; with no delta when prev did.
func fill(i int, prev, cur *sample, r *overload.Reading, acc *accumulator) {
	src := sources[i]
	if err := cur.skipped[i]; err != nil {
		acc.miss(src.input, "%v", err)
		return
	}
	if prev != nil && prev.skipped[i] != nil {
		src.fill(nil, cur, r, acc)
		if slices.Contains(acc.missing, src.input) {
			acc.note("%s: not read in the previous reading: no delta this reading", src.input)
		}
		return
	}
	src.fill(prev, cur, r, acc)
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

// bootID identifies the running kernel; "" when unknown.
func (p *Probe) bootID(ctx context.Context) string {
	b, err := readFile(ctx, filepath.Join(p.cfg.ProcRoot, "sys", "kernel", "random", "boot_id"))
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
	moved   []LinkBytes // one for each link of the reading's Links
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

// maxNote bounds a note's length in bytes: an error from a malformed
// file may quote the file's bytes, and a reading carries its notes to the
// platform and into its logs.
const maxNote = 512

func (a *accumulator) note(format string, args ...any) {
	n := cleanNote(fmt.Sprintf(format, args...))
	if !slices.Contains(a.notes, n) {
		a.notes = append(a.notes, n)
	}
}

// cleanNote returns n printable and at most maxNote bytes long: bytes
// that are not valid UTF-8 and characters that are not printable (a
// control character, a NUL from a file of garbage) become "?", and a
// longer note is cut at a character's boundary and ends in "…".
func cleanNote(n string) string {
	n = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(n, "?"))
	if len(n) <= maxNote {
		return n
	}
	cut := maxNote - len("…")
	for cut > 0 && !utf8.RuneStart(n[cut]) {
		cut--
	}
	return n[:cut] + "…"
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
