package pinproxy

import (
	"net"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Parking. A connection whose two directions have both waited, with no
// byte moved, for the parker's idle time gives up its goroutines: its two
// sockets go into an epoll set the parker owns, and the first byte or
// hang-up on either starts the copy path again in a fresh goroutine.
//
// How it rests on the runtime (runtime/netpoll_epoll.go,
// internal/poll/fd_poll_runtime.go, go1.26):
//
//   - Every socket stays in the runtime's own epoll set, edge-triggered,
//     from its open to its close; the parker's set holds it beside, level-
//     triggered and one-shot. Readiness seen by the runtime while no
//     goroutine waits only marks the socket's pollDesc ready, and a woken
//     pump calls its look (a non-blocking recvfrom) before it waits again,
//     as RawRead always does, so nothing that arrives while parked is
//     missed by either.
//   - A pump is asked to stop by a read deadline in the past: it wakes the
//     goroutine waiting in the netpoller (or fails the next read, or the
//     next splice's drain, before any byte is taken), so the bytes it has
//     not read stay queued on the socket. The proxy sets no deadline of
//     its own, so one seen while the link is parking is the parker's.
//   - epoll_ctl on a socket runs inside RawConn.Control, which holds a
//     reference to the fd: a Close from another goroutine waits for it,
//     so the number cannot be closed and reused under it. The kernel drops
//     a closed socket from every epoll set by itself, so a parked link
//     closed with a plain Close leaves nothing behind but the link, which
//     the next sweep finds (its Control fails) and ends; closePair wakes
//     it at once.
//   - The parker's epoll fd is itself in the runtime's netpoller (as an
//     *os.File), so waiting for events takes a goroutine only while
//     something is parked and never an OS thread; a read deadline on it
//     tells that goroutine to look whether it should end.
//
// Lock order: link.mu, then parker.mu.

// parker owns the epoll set parked connections wait in, and the sweeps
// that decide which connections park.
type parker struct {
	after time.Duration // idle time before a link parks
	tick  time.Duration // time between sweeps
	epoch time.Time     // sweeps measure time from here

	mu        sync.Mutex
	head      *link // every parkable link, for the sweeps
	timer     *time.Timer
	armed     bool     // timer will run a sweep
	epf       *os.File // the epoll set; nil while nothing is parked
	epfd      int      // epf's fd (epf.Fd would make it blocking)
	erc       syscall.RawConn
	slots     slotTable          // parked links by slot, for events
	byConn    map[net.Conn]*link // parked links by client conn, for closePair
	parked    int
	looping   bool        // the event goroutine runs
	waved     int         // links parked since the last return of memory
	wavedSeen int         // waved at the last sweep
	mem       *memoryGate // the proxy's: memory goes back at most once a minute
	sweep     []*link     // the sweep's scratch list
	kaSweep   []*link     // the sweep's scratch list of links whose keepalive is due

	// keepAlive sets keepalive on a link's upstream conn, for links
	// started with kaPending: the first sweep that finds one (within a
	// tick, at most a second, of its dial) sets it, so a connection that
	// ends before costs no setsockopt at all.
	keepAlive func(net.Conn)

	// lps, if not nil, are the proxy's event loops: their idle
	// connections count as parked.
	lps *loops
}

// parkedLink is what a link keeps for the parker.
type parkedLink struct {
	rcs        [2]syscall.RawConn // client, upstream; set while parked
	key        uint64             // gen<<32 | slot while parked; never 0
	prev, next *link              // in parker.head's list, under parker.mu
	listed     bool
	// The sweeps' own, under parker.mu.
	idle      bool
	idleSince time.Duration
	sweptN    int64
}

// newParker returns the parker of a proxy whose Config.ParkAfter is
// after (0: DefaultParkAfter; negative: connections never park, and the
// parker is nil). keepAlive sets an upstream conn's keepalive, for links
// whose kaPending says it is not set yet.
func newParker(after time.Duration, keepAlive func(net.Conn), now time.Time, mem *memoryGate) *parker {
	if after == 0 {
		after = DefaultParkAfter
	}
	if after < 0 {
		return nil
	}
	tick := min(max(after/2, 5*time.Millisecond), time.Second)
	pk := &parker{after: after, tick: tick, epoch: now, byConn: make(map[net.Conn]*link), keepAlive: keepAlive, mem: mem}
	pk.timer = time.AfterFunc(time.Hour, pk.sweepNow)
	pk.timer.Stop()
	return pk
}

// waited asks l to park at once if both its directions wait; pumps of
// eager links call it each time they wait.
func (l *link) waited() {
	if l.dirs[0].waiting.Load() && l.dirs[1].waiting.Load() {
		l.pk.ask(l)
	}
}

// add lists l for the sweeps, if it can park: both conns are
// *net.TCPConn, so their pumps wait in look, where a deadline stops them.
func (pk *parker) add(l *link) {
	if pk == nil {
		return
	}
	_, ok1 := l.client.(*net.TCPConn)
	_, ok2 := l.upstream.(*net.TCPConn)
	if !ok1 || !ok2 {
		pk.setKeepAlive(l) // no sweep will see it
		return
	}
	l.pk = pk
	if l.parkedLink == nil {
		l.parkedLink = new(parkedLink)
	}
	if pk.after < time.Millisecond {
		for i := range l.dirs {
			l.dirs[i].eager, l.dirs[i].link = true, l
		}
	}
	pk.mu.Lock()
	l.prev, l.next, l.listed = nil, pk.head, true
	if pk.head != nil {
		pk.head.prev = l
	}
	pk.head = l
	if !pk.armed {
		pk.armed = true
		pk.timer.Reset(pk.tick)
	}
	pk.mu.Unlock()
}

// remove takes an ended link off the sweeps' list.
func (pk *parker) remove(l *link) {
	if pk == nil || l.parkedLink == nil {
		return
	}
	pk.mu.Lock()
	if l.listed {
		if l.prev != nil {
			l.prev.next = l.next
		} else {
			pk.head = l.next
		}
		if l.next != nil {
			l.next.prev = l.prev
		}
		l.prev, l.next, l.listed = nil, nil, false
	}
	pk.mu.Unlock()
}

// sweepNow is the sweeps' timer function: one sweep at the time it runs.
// The parker's times are the real clock's, as its timer's are.
func (pk *parker) sweepNow() { pk.sweepAt(time.Now()) }

// sweepAt is one sweep at t: it asks the links idle long enough to park,
// and wakes parked links whose conns were closed with a plain Close.
func (pk *parker) sweepAt(t time.Time) {
	now := t.Sub(pk.epoch)
	park, wake, ka := pk.sweep[:0], []*link(nil), pk.kaSweep[:0]
	pk.mu.Lock()
	for l := pk.head; l != nil; l = l.next {
		if l.kaPending.Load() {
			ka = append(ka, l)
		}
		switch l.state.Load() {
		case linkActive:
			if !l.dirs[0].waiting.Load() || !l.dirs[1].waiting.Load() {
				l.idle = false
				continue
			}
			n := l.dirs[0].n.Load() + l.dirs[1].n.Load()
			if !l.idle || n != l.sweptN {
				l.idle, l.idleSince, l.sweptN = true, now, n
			}
			// Idle since at least the sweep that first saw it so, and
			// maybe since a tick before: park within pk.after.
			if now-l.idleSince >= pk.after-pk.tick {
				park = append(park, l)
			}
		case linkParked:
			l.idle = false
			if l.rcs[0].Control(noop) != nil || l.rcs[1].Control(noop) != nil {
				wake = append(wake, l)
			}
		default:
			l.idle = false
		}
	}
	pk.mu.Unlock()
	for _, l := range ka {
		l.mu.Lock()
		pk.setKeepAlive(l)
		l.mu.Unlock()
	}
	clear(ka)
	pk.kaSweep = ka[:0]
	for _, l := range park {
		pk.ask(l)
	}
	clear(park)
	pk.sweep = park[:0]
	for _, l := range wake {
		pk.wake(l, 0)
	}
	pk.returnMemory(t)
	// The next sweep, if anything is listed; sweeps never overlap. With
	// nothing parked the event goroutine is told to end (it lingers a
	// sweep, so that one connection parking and waking does not make and
	// close an epoll set each time).
	pk.mu.Lock()
	if pk.parked == 0 && pk.epf != nil {
		pk.epf.SetReadDeadline(aLongTimeAgo)
	}
	if pk.head != nil {
		pk.timer.Reset(pk.tick)
	} else {
		pk.armed = false
	}
	pk.mu.Unlock()
}

func noop(uintptr) {}

// setKeepAlive sets the keepalive of l's upstream if it is still to be
// set. Call it with l.mu held, or before l is started.
func (pk *parker) setKeepAlive(l *link) {
	if l.kaPending.CompareAndSwap(true, false) {
		pk.keepAlive(l.upstream)
	}
}

// ask asks l's pumps to pause so that l parks.
func (pk *parker) ask(l *link) {
	l.mu.Lock()
	if l.casState(linkActive, linkParking) {
		l.client.SetReadDeadline(aLongTimeAgo)
		l.upstream.SetReadDeadline(aLongTimeAgo)
	}
	l.mu.Unlock()
}

// unpause sends a link whose park was given up back to copying, and
// reports whether it did: not while an upgrade holds it. Only l's run
// goroutine calls it, while l is parking or moving.
func (pk *parker) unpause(l *link) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.Load() == linkMoving {
		return false
	}
	l.client.SetReadDeadline(time.Time{})
	l.upstream.SetReadDeadline(time.Time{})
	l.setState(linkActive)
	return true
}

// park puts l, both of whose pumps paused, into the epoll set, and reports
// whether it did; if not (a conn was closed meanwhile, or epoll failed),
// l's run goroutine goes back to copying. Only l's run goroutine calls it.
func (pk *parker) park(l *link) bool {
	if pk == nil {
		return false
	}
	rc0, rc1, ok := rawConns(l.client, l.upstream)
	if !ok {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.Load() != linkParking { // an upgrade holds it
		return false
	}
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.epf == nil && !pk.openLocked() {
		return false
	}
	key := pk.slots.take(l)
	epfd := pk.epfd
	if !epollCtl(epfd, unix.EPOLL_CTL_ADD, rc0, key) {
		pk.slots.release(key)
		return false
	}
	if !epollCtl(epfd, unix.EPOLL_CTL_ADD, rc1, key) {
		epollCtl(epfd, unix.EPOLL_CTL_DEL, rc0, 0)
		pk.slots.release(key)
		return false
	}
	l.rcs, l.key = [2]syscall.RawConn{rc0, rc1}, key
	l.setState(linkParked)
	pk.byConn[l.client] = l
	pk.parked++
	pk.waved++
	if !pk.looping {
		pk.looping = true
		go pk.loop(pk.epf, pk.erc)
	}
	return true
}

// openLocked makes the epoll set.
func (pk *parker) openLocked() bool {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return false
	}
	f, rc, err := pollFile(fd, "pinproxy-park")
	if err != nil {
		return false
	}
	pk.epf, pk.epfd, pk.erc = f, fd, rc
	return true
}

// epollCtl adds (or deletes) the socket of rc to (from) the epoll set
// epfd, with key as the event's data, while holding a reference to the
// socket's fd. It reports whether it did.
func epollCtl(epfd, op int, rc syscall.RawConn, key uint64) bool {
	var errno error
	err := rc.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(uint32(key)), Pad: int32(uint32(key >> 32))}
		errno = unix.EpollCtl(epfd, op, int(fd), &ev)
	})
	return err == nil && errno == nil
}

// wake hands a parked link back to a goroutine. key 0 matches any park;
// otherwise only the park that key was given to (an event may come late).
func (pk *parker) wake(l *link, key uint64) {
	l.mu.Lock()
	if l.state.Load() != linkParked || (key != 0 && l.key != key) {
		l.mu.Unlock()
		return
	}
	l.setState(linkWaking)
	pk.mu.Lock()
	pk.forgetLocked(l)
	pk.mu.Unlock()
	l.mu.Unlock()
	go l.resume()
}

// resume runs a woken link's copy path again.
func (l *link) resume() {
	l.client.SetReadDeadline(time.Time{})
	l.upstream.SetReadDeadline(time.Time{})
	l.setState(linkActive)
	l.run()
}

// parkedNow returns how many links are parked.
func (pk *parker) parkedNow() int {
	if pk == nil {
		return 0
	}
	pk.mu.Lock()
	n := pk.parked
	pk.mu.Unlock()
	return n + pk.lps.idle()
}

// closed wakes the link parked on client, if any, after its conns were
// closed.
func (pk *parker) closed(client net.Conn) {
	if pk == nil {
		return
	}
	pk.mu.Lock()
	l := pk.byConn[client]
	pk.mu.Unlock()
	if l != nil {
		pk.wake(l, 0)
	}
}

// loop waits for events on the epoll set f and wakes the links they are
// for, until a sweep finds nothing parked and sets a deadline on f; then
// it closes f.
func (pk *parker) loop(f *os.File, rc syscall.RawConn) {
	events := make([]unix.EpollEvent, 128)
	var woken []*link
	var keys []uint64
	for {
		var n int
		err := rc.Read(func(fd uintptr) bool {
			var e error
			n, e = unix.EpollWait(int(fd), events, 0)
			if e != nil {
				n = 0
			}
			return n > 0
		})
		pk.mu.Lock()
		for _, ev := range events[:n] {
			key := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if l := pk.slots.lookup(key); l != nil {
				woken = append(woken, l)
				keys = append(keys, key)
			}
		}
		pk.mu.Unlock()
		for j, l := range woken {
			pk.wake(l, keys[j])
		}
		clear(woken)
		woken, keys = woken[:0], keys[:0]
		pk.mu.Lock()
		if err != nil && pk.parked == 0 {
			pk.looping = false
			pk.epf, pk.erc = nil, nil
			pk.mu.Unlock()
			f.Close()
			return
		}
		if err != nil {
			f.SetReadDeadline(time.Time{})
		}
		pk.mu.Unlock()
	}
}

// returnMemory gives the memory of a park wave back to the kernel once
// the wave has settled (no link parked since the last sweep): the stacks
// of the goroutines that ended are freed only by a GC, which an idle
// process runs every two minutes, and the scavenger then returns them
// only down to about twice the live heap. Measured with
// internal/tools/proxybench, 9,000 connections parked by the default 30 s:
// 7.4 KiB of VmRSS per connection a minute after they opened without
// this, 3.6 with it. It runs at most once a minute, after at least 1,000
// links parked.
func (pk *parker) returnMemory(now time.Time) {
	pk.mu.Lock()
	settled := pk.waved == pk.wavedSeen
	pk.wavedSeen = pk.waved
	due := settled && pk.waved >= 1000 && pk.mem.take(now)
	if due {
		pk.waved, pk.wavedSeen = 0, 0
	}
	pk.mu.Unlock()
	if due {
		debug.FreeOSMemory()
	}
}

// rawConns returns the raw conns of two *net.TCPConn (or other
// syscall.Conn), or ok false.
func rawConns(a, b net.Conn) (ra, rb syscall.RawConn, ok bool) {
	sa, ok1 := a.(syscall.Conn)
	sb, ok2 := b.(syscall.Conn)
	if !ok1 || !ok2 {
		return nil, nil, false
	}
	var err1, err2 error
	ra, err1 = sa.SyscallConn()
	rb, err2 = sb.SyscallConn()
	return ra, rb, err1 == nil && err2 == nil
}

// aLongTimeAgo is a read deadline that has passed: setting it makes a
// read waiting in the netpoller return at once.
var aLongTimeAgo = time.Unix(1, 0)

// forgetLocked takes parked link l out of the parker: out of epoll, its
// slot freed, no longer counted. Call with pk.mu held, after l's state
// says it is no longer parked.
func (pk *parker) forgetLocked(l *link) {
	if pk.epf != nil {
		epollCtl(pk.epfd, unix.EPOLL_CTL_DEL, l.rcs[0], 0)
		epollCtl(pk.epfd, unix.EPOLL_CTL_DEL, l.rcs[1], 0)
	}
	pk.slots.release(l.key)
	delete(pk.byConn, l.client)
	pk.parked--
	l.rcs, l.key = [2]syscall.RawConn{}, 0
}
