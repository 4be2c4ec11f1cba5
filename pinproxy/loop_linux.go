package pinproxy

import (
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Event loops: the relay of an established connection on Linux, as HAProxy
// relays (src/raw_sock.c, src/pipe.c), one loop per GOMAXPROCS. A TCP
// listener given to Serve is in every loop's set: the loop a new client
// wakes accepts it as a bare socket and dials its upstream itself
// (accept_linux.go, connect_linux.go), so neither socket ever joins the
// runtime's netpoller, and the connection stays on that loop. A
// connection whose conns are net.Conns (a listener of another kind,
// Config.DialContext, a hand-over's) is dialed in Go by its handler
// goroutine; once the pair is open and the PROXY header sent, its two
// sockets leave the runtime's netpoller (each is duplicated and its
// net.Conn closed, which takes the original out of the runtime's epoll
// set) and join a loop chosen in turn (attach). From there no goroutine,
// stack or buffer is the connection's own:
//
//   - Both sockets are in the loop's set edge-triggered, for input and
//     hang-up; output readiness is asked for only once a socket has been
//     found full (an upstream the loop dialed has it from its connect
//     on). An event on a socket moves what it has to its peer:
//     nonblocking splice(2) from the socket into a pipe, then from the
//     pipe to the peer, until the socket has nothing more (EAGAIN with an
//     empty pipe, so the EAGAIN is the socket's, not the pipe's) or the
//     peer is full (the bytes stay in the pipe, and the peer's output
//     readiness resumes the direction).
//   - Pipes come from the loop's own pool and go back as soon as they are
//     empty, so only a direction with bytes in flight holds one: an idle
//     connection holds its two sockets and its link, nothing else.
//   - One event moves at most loopBudget bytes of one direction; a busier
//     direction waits for the other connections of the batch, on the
//     loop's list of unfinished directions, and goes on after them.
//   - A clean end (EOF) of one side's stream half-closes the other's
//     (shutdown SHUT_WR) once every byte before it has gone; both ended,
//     both sockets are closed. An error on either (a reset, a keepalive or
//     user timeout, a write the peer refused) closes both with SO_LINGER
//     0, so the peer on the other side sees a reset, as it would across a
//     direct connection.
//   - Keepalive and the user timeout are socket options, set before the
//     sockets join a loop, and stay with them.
//   - A loop holds its lock while it handles a batch of events, never
//     while it waits for them: other goroutines (a rebalance closing a
//     connection, a hand-over taking it) take the lock and act on the
//     pair themselves, which the loop's next batch sees. A connection's
//     end is reported (link.end, so done and the per-connection line)
//     after the lock is let go.
//
// Connections whose conns are not both *net.TCPConn (a DialContext of the
// caller's that returns another kind, say) keep the goroutine path
// (copy.go, park_linux.go).

// loopBudget is the most one direction moves for one event before the
// loop turns to its other connections.
const loopBudget = 1 << 20

// loopPipesKept is how many empty pipes a loop keeps for the next burst;
// more are closed as they empty.
const loopPipesKept = 64

// loops is a proxy's set of event loops.
type loops struct {
	n     int
	after time.Duration       // ParkAfter: how long a connection idles before it counts as parked
	ka    net.KeepAliveConfig // what an upstream with its keepalive pending gets

	// rw is held for reading by each attach, from its check of stopped
	// until its connection is in a loop's set, and for writing by stop:
	// no connection joins a loop that may have ended.
	rw      sync.RWMutex
	stopped bool
	startMu sync.Mutex
	ls      []*evloop // made on the first attach, under startMu
	wg      sync.WaitGroup
	next    atomic.Uint32
	lnSeq   atomic.Uint32 // the last listener's key (accept_linux.go)

	// A wave of connections leaves garbage behind (their accepts' and
	// dials'), which an idle process collects only every two minutes:
	// once a wave of at least wave connections has settled (none joined
	// for waveSettle), the memory goes back to the kernel, at most once a
	// minute, as the parker does for a wave of parks.
	waved atomic.Int64 // attaches since the wave began
	waveT *time.Timer  // under startMu
	waveN int64        // waved at the timer's last look
	mem   *memoryGate  // the proxy's: memory goes back at most once a minute
}

const (
	wave       = 1000
	waveSettle = 250 * time.Millisecond
)

// settle is the wave timer's function.
func (ls *loops) settle() {
	ls.startMu.Lock()
	defer ls.startMu.Unlock()
	n := ls.waved.Load()
	if n != ls.waveN || !ls.waved.CompareAndSwap(n, 0) {
		ls.waveN = ls.waved.Load()
		ls.waveT.Reset(waveSettle)
		return
	}
	ls.waveN = 0
	if n >= wave && ls.mem.take(time.Now()) {
		debug.FreeOSMemory()
	}
}

// evloop is one event loop: an epoll set, the connections in it, and its
// pool of pipes.
type evloop struct {
	ep, efd int             // epoll set; eventfd that wakes the loop to stop
	epf     *os.File        // ep, in the runtime's netpoller
	erc     syscall.RawConn // epf's
	epoch   time.Time

	mu       sync.Mutex
	slots    slotTable
	held     int           // connections in the set
	load     atomic.Int32  // held, for other loops to read (loops.balance)
	pipes    []*splicePipe // empty pipes, ready for a burst
	again    []loopDir     // directions that used their budget
	ended    []*link       // ended in this batch: reported after mu is let go
	buf      []byte        // the looks' buffer (pump)
	stopping bool
	// kaq lists the connections whose upstream's keepalive is still to be
	// set (link.kaPending); the loop sets it kaDelay after the first was
	// listed, so a connection that ends sooner, as most short ones do,
	// costs no setsockopt for it (as the parker's sweep does for the
	// goroutine path).
	kaq  []uint64
	kaAt time.Duration // when kaq is due, since epoch
	ka   net.KeepAliveConfig
	// Dials (connect_linux.go): the connects' deadlines, in order; the
	// connects that ended in this batch, for after it; and whether the
	// loop waits for events (sleeping) with a deadline (armed, since
	// epoch; 0: none), so a dial with an earlier one wakes it.
	dialQ    []dialTimer
	dialed   []*link
	incoming []*link // clients another loop accepted for this one (balance)
	sleeping bool
	armed    time.Duration
	// Listeners (accept_linux.go): those whose socket may be in the set,
	// by key; those that had an event in this batch, to accept from
	// after it; and the accepts' buffers.
	lns     map[uint32]*rawListener
	accepts []*rawListener
	asa     unix.RawSockaddrAny // an accepted client's address, read at once
}

// since is the time since lp's epoch, lp's clock for deadlines.
func (lp *evloop) since() time.Duration { return time.Since(lp.epoch) }

// kaDelay is how long after its dial an upstream's keepalive is set (at
// most twice that): a probe is due only after the idle time (30 s by
// default), so setting it a second late delays none.
const kaDelay = time.Second

// loopDir names one direction of the connection in a slot.
type loopDir struct {
	key uint64
	i   int
}

// loopState is what a link keeps while a loop holds it.
type loopState struct {
	lfd     [2]int32       // client, upstream; -1: not held
	lkey    uint64         // gen<<32 | slot; 0: not in a slot
	pipe    [2]*splicePipe // bytes in flight per direction
	own     [2]bool        // pipe[i] is the loop's (closed by it, not by a cleanup)
	blocked [2]bool        // direction i waits for its destination's room
	outOn   [2]bool        // socket i has output readiness in the set
	hup     [2]bool        // socket i's peer is closing (EPOLLRDHUP, HUP or ERR seen): read it to its end
	bulk    [2]bool        // direction i moved more than a look's buffer at its last event
	kept    [2]bool        // lfd[i] is conn i's own descriptor, borrowed (the caller's conn stays open)
	last    atomic.Int64   // when bytes last moved, ns since lp.epoch
	killed  atomic.Bool    // closed from outside before or while the loop holds it
	onLoop  atomic.Pointer[evloop]
	dl      *dialing // while its upstream is being dialed (connect_linux.go); under the loop's mu
}

// newLoops returns the event loops of a proxy (not started: the first
// attach starts them), or nil when the proxy copies with goroutines.
func newLoops(on bool, parkAfter time.Duration, ka net.KeepAliveConfig, mem *memoryGate) *loops {
	if !on {
		return nil
	}
	if parkAfter == 0 {
		parkAfter = DefaultParkAfter
	}
	return &loops{n: runtime.GOMAXPROCS(0), after: parkAfter, ka: ka, mem: mem}
}

// pick returns the loop for the next connection, in turn, making and
// starting it on its first use (so a proxy with one connection runs one
// loop); nil if it cannot be made.
func (ls *loops) pick() *evloop {
	i := int(ls.next.Add(1) % uint32(ls.n))
	ls.startMu.Lock()
	defer ls.startMu.Unlock()
	if ls.ls == nil {
		ls.ls = make([]*evloop, ls.n)
	}
	if lp := ls.ls[i]; lp != nil {
		return lp
	}
	lp, err := newEvloop(ls.ka)
	if err != nil {
		return nil
	}
	ls.ls[i] = lp
	ls.wg.Go(lp.run)
	return lp
}

// startAll starts every loop not started yet, and returns them all; nil
// if one cannot be made.
func (ls *loops) startAll() []*evloop {
	ls.rw.RLock()
	defer ls.rw.RUnlock()
	if ls.stopped {
		return nil
	}
	ls.startMu.Lock()
	defer ls.startMu.Unlock()
	if ls.ls == nil {
		ls.ls = make([]*evloop, ls.n)
	}
	for i, lp := range ls.ls {
		if lp != nil {
			continue
		}
		lp, err := newEvloop(ls.ka)
		if err != nil {
			return nil
		}
		ls.ls[i] = lp
		ls.wg.Go(lp.run)
	}
	return slices.Clone(ls.ls)
}

// listening gives r a key in every loop's set, and returns it.
func (ls *loops) listening(r *rawListener) uint32 {
	id := ls.lnSeq.Add(1)
	for _, lp := range r.lps {
		lp.mu.Lock()
		if lp.lns == nil {
			lp.lns = make(map[uint32]*rawListener)
		}
		lp.lns[id] = r
		lp.mu.Unlock()
	}
	return id
}

// unlisten takes r's key out of the loops, its socket out of their sets
// already (rawListener.pause).
func (ls *loops) unlisten(r *rawListener) {
	for _, lp := range r.lps {
		lp.mu.Lock()
		delete(lp.lns, r.id)
		lp.mu.Unlock()
	}
}

// all returns the loops started so far.
func (ls *loops) all() []*evloop {
	ls.startMu.Lock()
	defer ls.startMu.Unlock()
	var all []*evloop
	for _, lp := range ls.ls {
		if lp != nil {
			all = append(all, lp)
		}
	}
	return all
}

func newEvloop(ka net.KeepAliveConfig) (*evloop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return nil, err
	}
	lp := &evloop{ep: ep, efd: efd, epoch: time.Now(), ka: ka, buf: make([]byte, smallBurst)}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1, Pad: -1}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, efd, &ev); err != nil {
		unix.Close(ep)
		unix.Close(efd)
		return nil, err
	}
	// The set itself waits in the runtime's netpoller, as the parker's
	// does: a loop with nothing to do parks its goroutine rather than an
	// OS thread in epoll_wait, which would cost the scheduler a hand-off
	// of its P and a wake-up (futex) at every event.
	if lp.epf, lp.erc, err = pollFile(ep, "pinproxy-loop"); err != nil {
		unix.Close(efd)
		return nil, err
	}
	return lp, nil
}

// pollFile makes the descriptor fd (an epoll set, a listening socket)
// nonblocking and an *os.File in the runtime's netpoller, so that a
// goroutine can wait for it to be readable (RawConn.Read) with no OS
// thread of its own, and a deadline can end the wait. On an error fd is
// closed.
func pollFile(fd int, name string) (*os.File, syscall.RawConn, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, rc, nil
}

func (lp *evloop) close() {
	lp.epf.Close()
	unix.Close(lp.efd)
	for _, p := range lp.pipes {
		p.closeOwn()
	}
	lp.pipes = nil
}

// stop tells the loops to end once they hold nothing, and waits for them.
// A connection attached later copies with goroutines.
func (ls *loops) stop() {
	if ls == nil {
		return
	}
	ls.rw.Lock()
	ls.stopped = true
	ls.rw.Unlock()
	ls.startMu.Lock()
	if ls.waveT != nil {
		ls.waveT.Stop()
	}
	ls.startMu.Unlock()
	all := ls.all()
	for _, lp := range all {
		lp.mu.Lock()
		lp.stopping = true
		lp.mu.Unlock()
		lp.wake()
	}
	ls.wg.Wait()
	for _, lp := range all {
		lp.close()
	}
}

func (lp *evloop) wake() {
	one := uint64(1)
	unix.Write(lp.efd, (*[8]byte)(unsafe.Pointer(&one))[:])
}

// attach hands l's two conns to a loop, which copies from then on and
// ends l (link.end) when both streams have ended, and reports whether it
// did; if not (a conn is not a *net.TCPConn, the loops stopped), l keeps
// the goroutine path. Called once, before l copies anything, or for a
// link a hand-over brought in (bytes pending in l.dirs). The loop holds
// duplicates of the sockets, and closes the conns, which takes them out
// of the runtime's netpoller, unless keep says a conn is the caller's
// (accepted from a listener not made by Listen, or from Config.DialContext):
// the caller may still hold it, so it stays open, in the netpoller too,
// until the connection ends, and the loop borrows its descriptor.
func (ls *loops) attach(l *link, keep [2]bool) bool {
	if ls == nil {
		return false
	}
	c, ok1 := l.client.(*net.TCPConn)
	u, ok2 := l.upstream.(*net.TCPConn)
	if !ok1 || !ok2 {
		return false
	}
	ls.rw.RLock()
	defer ls.rw.RUnlock()
	if ls.stopped {
		return false
	}
	lp := ls.pick()
	if lp == nil {
		return false
	}
	ls.joined()
	l.onLoop.Store(lp)
	cfd, err1 := dupConn(c, keep[0])
	ufd, err2 := dupConn(u, keep[1])
	if err1 != nil || err2 != nil {
		// Closed from outside already (or out of descriptors): it ends as a
		// goroutine link whose conns were closed would.
		if !keep[0] {
			closeFD(cfd)
		}
		if !keep[1] {
			closeFD(ufd)
		}
		l.onLoop.Store(nil)
		err := err1
		if err == nil {
			err = err2
		}
		l.client.Close()
		l.upstream.Close()
		l.dirs[0].ended, l.dirs[0].err = true, err
		l.dirs[1].ended = true
		l.end()
		return true
	}
	if !keep[0] {
		l.client.Close() // the duplicate holds the socket; this takes it out of the netpoller
	}
	if !keep[1] {
		l.upstream.Close()
	}
	l.kept = keep
	lp.mu.Lock()
	ok := lp.addLocked(l, cfd, ufd)
	lp.mu.Unlock()
	if !ok {
		lp.wake() // the loop reports its end
	}
	return true
}

// joined counts a connection that joined a loop in the wave.
func (ls *loops) joined() {
	if ls.waved.Add(1) == 1 {
		ls.startMu.Lock()
		if ls.waveT == nil {
			ls.waveT = time.AfterFunc(waveSettle, ls.settle)
		} else {
			ls.waveT.Reset(waveSettle)
		}
		ls.startMu.Unlock()
	}
}

// dupConn duplicates c's socket (close-on-exec; the duplicate shares
// O_NONBLOCK with it), or, with keep, returns c's own descriptor, which
// stays c's: the loop borrows it until the connection ends, and never
// closes it (link.end closes c).
func dupConn(c *net.TCPConn, keep bool) (int32, error) {
	get := dupFD
	if keep {
		get = rawFD
	}
	fd, err := get(c)
	return int32(fd), err
}

// dupFD duplicates sc's socket, close-on-exec; the duplicate shares
// O_NONBLOCK with it.
func dupFD(sc syscall.Conn) (int, error) {
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	var fd int32 = -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = dupRaw(int32(s)) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl", derr)
	}
	return int(fd), nil
}

// dupRaw duplicates the descriptor fd, close-on-exec.
func dupRaw(fd int32) (int32, error) {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	return int32(d), err
}

func closeFD(fd int32) {
	if fd >= 0 {
		rawCall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	}
}

// rawCall makes a system call that never blocks (nonblocking sockets, an
// epoll set, close of a socket with no lingering) without telling the
// scheduler, as an event loop in C makes it: a close or a connect does the
// loopback's softirq work in the call, long enough that a syscall.Syscall
// had the runtime hand the loop's P to another thread and take it back (a
// futex wake and a sleep per connection, measured with strace). Its
// arguments hold no Go pointer: a call that passes one uses
// syscall.RawSyscall6 itself, with the conversion in that call's
// arguments, so the object stays put and alive.
func rawCall(trap, a1, a2, a3 uintptr) syscall.Errno {
	_, _, e := syscall.RawSyscall(trap, a1, a2, a3)
	return e
}

// epollSet is epoll_ctl(2) as a raw call (rawCall).
func epollSet(ep, op int, fd int32, ev *unix.EpollEvent) error {
	_, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(ep), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// lingerZero sets SO_LINGER to 0 on the socket fd, so its close resets it.
func lingerZero(fd int32) {
	lg := unix.Linger{Onoff: 1, Linger: 0}
	syscall.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER, uintptr(unsafe.Pointer(&lg)), unsafe.Sizeof(lg), 0)
}

// addLocked puts the sockets cfd, ufd of l into lp's set; false: l has
// ended (closed from outside meanwhile, or epoll failed), with the sockets
// closed and its result in l.dirs.
func (lp *evloop) addLocked(l *link, cfd, ufd int32) bool {
	l.lfd = [2]int32{cfd, ufd}
	l.outOn = [2]bool{}
	for i := range l.dirs { // a pipe a hand-over brought, or gave back
		if p := l.dirs[i].pipe; p != nil {
			l.pipe[i], l.own[i] = p, false
			l.dirs[i].pipe = nil
		}
	}
	if l.killed.Load() {
		lp.closeLocked(l, net.ErrClosed, false)
		return false
	}
	l.lkey = lp.slots.take(l)
	lp.held++
	lp.load.Store(int32(lp.held))
	l.last.Store(int64(lp.since()))
	l.setState(linkLooped)
	return lp.joinLocked(l, [2]int{unix.EPOLL_CTL_ADD, unix.EPOLL_CTL_ADD})
}

// ctlNone, as joinLocked's op for a socket, leaves it in lp's set as it
// is.
const ctlNone = -1

// joinLocked puts the sockets of l, which holds a slot of lp, in lp's set
// (ops: add, or ctlNone for the upstream a dial put there); false: l has
// ended.
func (lp *evloop) joinLocked(l *link, ops [2]int) bool {
	for side := range 2 {
		// A direction with bytes pending (handed over, or given back by a
		// hand-over that failed) waits for its destination's room.
		if len(l.dirs[side].pending) > 0 || l.pipe[side] != nil && l.pipe[side].n > 0 {
			l.blocked[side] = true
			l.outOn[1-side] = true
		}
	}
	for side := range 2 {
		if ops[side] == ctlNone {
			continue
		}
		if err := lp.ctl(ops[side], l, side); err != nil {
			lp.closeLocked(l, os.NewSyscallError("epoll_ctl", err), false)
			return false
		}
	}
	if l.kaPending.Load() {
		if len(lp.kaq) == 0 {
			lp.kaAt = time.Since(lp.epoch) + kaDelay
		}
		lp.kaq = append(lp.kaq, l.lkey)
	}
	return true
}

// keepAlives sets the keepalive of the upstreams listed in kaq, when due.
func (lp *evloop) keepAlives(now time.Duration) {
	if len(lp.kaq) == 0 || now < lp.kaAt {
		return
	}
	for _, key := range lp.kaq {
		if l := lp.slots.lookup(key); l != nil && l.kaPending.CompareAndSwap(true, false) {
			fd := int(l.lfd[1])
			if setKeepAliveFD(fd, lp.ka) == nil && lp.ka.Enable {
				setUserTimeoutFD(fd, userTimeout(lp.ka))
			}
		}
	}
	lp.kaq = lp.kaq[:0]
}

// ctl adds (or modifies) socket side of l in lp's set.
func (lp *evloop) ctl(op int, l *link, side int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET}
	if l.outOn[side] {
		ev.Events |= unix.EPOLLOUT
	}
	key := l.lkey | uint64(side)<<63
	ev.Fd, ev.Pad = int32(uint32(key)), int32(uint32(key>>32))
	return epollSet(lp.ep, op, l.lfd[side], &ev)
}

// run is the loop: wait for events, handle a batch under lp.mu, report the
// connections that ended.
func (lp *evloop) run() {
	evs := make([]unix.EpollEvent, 256)
	var again []loopDir
	// The lists taken after each batch, each swapped with lp's (as
	// again is) and the wait's function, made once: a loop allocates
	// nothing per wait.
	var ended, dialed, incoming []*link
	n := 0
	ready := func(fd uintptr) bool {
		n = epollNow(int(fd), evs)
		return n > 0
	}
	for {
		lp.mu.Lock()
		wait := len(lp.again) == 0 && len(lp.ended) == 0 && len(lp.incoming) == 0
		var due time.Duration
		if len(lp.kaq) > 0 {
			due = lp.kaAt
		}
		if len(lp.dialQ) > 0 && (due == 0 || lp.dialQ[0].at < due) {
			due = lp.dialQ[0].at
		}
		if lp.stopping && lp.held == 0 && len(lp.ended) == 0 {
			lp.mu.Unlock()
			return
		}
		lp.sleeping, lp.armed = wait, due
		lp.mu.Unlock()
		n = 0
		if !wait {
			n = epollNow(lp.ep, evs)
		} else {
			if due != 0 {
				lp.epf.SetReadDeadline(lp.epoch.Add(due))
			}
			lp.erc.Read(ready) // an error is the deadline: the keepalives or a dial's timeout are due
			if due != 0 {
				lp.epf.SetReadDeadline(time.Time{})
			}
		}
		lp.mu.Lock()
		lp.sleeping = false
		for _, ev := range evs[:n] {
			if ev.Fd == -1 && ev.Pad == -1 {
				var b [8]byte
				unix.Read(lp.efd, b[:])
				continue
			}
			key := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if key>>32 == 0 { // a listener's: no slot has generation 0
				lp.listenEvent(uint32(key))
				continue
			}
			side := int(key >> 63)
			l := lp.slots.lookup(key &^ (1 << 63))
			if l == nil {
				continue // ended earlier in this batch
			}
			if l.dl != nil { // its upstream's connect ended
				if side == 1 {
					lp.connectEvent(l, ev.Events)
				}
				continue
			}
			if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				l.hup[side] = true
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				lp.pump(l, side)
			}
			if ev.Events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 && l.lkey != 0 && l.blocked[1-side] {
				lp.pump(l, 1-side)
			}
		}
		// Directions that used their budget go on, each once, after the
		// batch; those that use it again wait for the next.
		again, lp.again = lp.again, again[:0]
		for _, d := range again {
			if l := lp.slots.lookup(d.key); l != nil {
				lp.pump(l, d.i)
			}
		}
		clear(again)
		now := lp.since()
		if len(lp.kaq) > 0 {
			lp.keepAlives(now)
		}
		if len(lp.dialQ) > 0 {
			lp.expireDials(now)
		}
		ended, lp.ended = lp.ended, ended[:0]
		dialed, lp.dialed = lp.dialed, dialed[:0]
		incoming, lp.incoming = lp.incoming, incoming[:0]
		accepts := lp.accepts
		lp.accepts = accepts[:0]
		lp.mu.Unlock()
		for _, l := range incoming {
			l.dl.p.dialNext(l)
		}
		for _, l := range dialed {
			l.dl.p.dialDecided(l)
		}
		for _, l := range ended {
			l.end()
		}
		clear(incoming)
		clear(dialed)
		clear(ended)
		for i, r := range accepts {
			r.acceptOn(lp)
			accepts[i] = nil
		}
	}
}

// listenEvent is an event on the listener of key id: its clients are
// taken after the batch (rawListener.acceptOn). A stopping loop takes
// none, and takes the listener out of its set, where it would wake the
// loop again and again. Call with lp.mu held.
func (lp *evloop) listenEvent(id uint32) {
	r := lp.lns[id]
	if r == nil {
		return
	}
	if lp.stopping {
		epollSet(lp.ep, unix.EPOLL_CTL_DEL, r.fd, nil)
		return
	}
	lp.accepts = append(lp.accepts, r)
}

// pump moves what socket i of l has to socket 1-i: direction i (0: client
// to upstream). Call with lp.mu held.
func (lp *evloop) pump(l *link, i int) {
	d := &l.dirs[i]
	if d.ended {
		return
	}
	src, dst := l.lfd[i], l.lfd[1-i]
	budget := loopBudget
	// A direction that moved more than a look's buffer at its last event
	// is streaming: its bytes go by splice at once, with no copy.
	moved, look := false, !l.bulk[i]
	defer func() {
		if moved {
			l.last.Store(int64(lp.since()))
		}
	}()
	for {
		if len(d.pending) > 0 { // bytes a hand-over brought, or a send left
			n, errno := sendNow(dst, d.pending)
			if errno != 0 {
				lp.stall(l, i, "write", errno)
				return
			}
			d.pending = d.pending[n:]
			if len(d.pending) == 0 {
				d.pending = nil
			}
			d.add(int64(n))
			moved = true
			continue
		}
		if p := l.pipe[i]; p != nil && p.n > 0 {
			n, errno := spliceNow(p.r, int(dst), p.n)
			if errno != 0 {
				lp.stall(l, i, "splice", errno)
				return
			}
			p.n -= n
			budget -= n
			d.add(int64(n))
			moved = true
			continue
		}
		l.blocked[i] = false
		if budget <= 0 {
			lp.putPipe(l, i)
			lp.again = append(lp.again, loopDir{l.lkey, i})
			return
		}
		p := l.pipe[i]
		if look || p == nil || p.w < 0 {
			lp.putPipe(l, i)
			if !look {
				p = lp.getPipe(l, i)
			}
		}
		if look || p == nil {
			// A look: what src has, up to the loop's buffer, read and
			// written through it. A burst that fits (a peer protocol's
			// message, a request) moves with two system calls and no
			// pipe, and a short read says src has nothing more (an edge
			// comes with the next byte) unless its peer is closing; a
			// burst that fills the buffer goes on by splice. Without a
			// pipe to be had, every read is a look.
			look = false
			n, errno := recvNow(uintptr(src), lp.buf)
			switch {
			case errno == unix.EAGAIN:
				return
			case errno != 0:
				lp.fail(l, i, "read", errno)
				return
			case n == 0:
				lp.eof(l, i)
				return
			}
			m, errno := sendNow(dst, lp.buf[:n])
			if errno == unix.EAGAIN {
				m = 0
			} else if errno != 0 {
				lp.fail(l, i, "write", errno)
				return
			}
			d.add(int64(m))
			moved = true
			if m < n {
				d.pending = append([]byte(nil), lp.buf[m:n]...)
				lp.block(l, i)
				return
			}
			budget -= n
			if n < len(lp.buf) && !l.hup[i] {
				l.bulk[i] = false
				return
			}
			continue
		}
		n, errno := spliceNow(int(src), int(p.w), splicePipeSize)
		switch {
		case errno == unix.EAGAIN: // the pipe is empty: src has nothing more
			lp.putPipe(l, i)
			l.bulk[i] = loopBudget-budget > smallBurst
			return
		case errno != 0:
			lp.putPipe(l, i)
			lp.fail(l, i, "splice", errno)
			return
		case n == 0:
			lp.putPipe(l, i)
			lp.eof(l, i)
			return
		}
		p.n = n
	}
}

// block makes direction i wait for room in its destination, socket 1-i.
func (lp *evloop) block(l *link, i int) {
	l.blocked[i] = true
	if !l.outOn[1-i] {
		l.outOn[1-i] = true
		if err := lp.ctl(unix.EPOLL_CTL_MOD, l, 1-i); err != nil {
			lp.fail(l, i, "epoll_ctl", err.(syscall.Errno))
		}
	}
}

// stall deals with a write (op) to direction i's destination that failed
// with errno: EAGAIN waits for room (block); any other error ends l (fail).
func (lp *evloop) stall(l *link, i int, op string, errno syscall.Errno) {
	if errno == unix.EAGAIN {
		lp.block(l, i)
		return
	}
	lp.fail(l, i, op, errno)
}

// eof ends direction i cleanly: its source's stream ended.
func (lp *evloop) eof(l *link, i int) {
	l.dirs[i].ended = true
	l.endedFirst(sideClient + side(i))
	if l.clean.Add(1) == 2 {
		lp.closeLocked(l, nil, false)
		return
	}
	if rawCall(unix.SYS_SHUTDOWN, uintptr(l.lfd[1-i]), unix.SHUT_WR, 0) != 0 {
		lp.closeLocked(l, nil, false) // as a dst that cannot half-close: close both
	}
}

// fail ends l on an error in direction i: both sockets reset.
func (lp *evloop) fail(l *link, i int, op string, errno syscall.Errno) {
	d, c := &l.dirs[i], l.client
	if i == 1 {
		c = l.upstream
	}
	d.ended = true
	d.err = &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
	l.endedFirst(sideClient + side(i))
	lp.closeLocked(l, nil, true)
}

// closeLocked takes l out of lp, closes its sockets (with a reset when
// abort), frees its pipes, and queues its end for after the batch. err,
// if not nil, is the error of each direction not ended yet (the proxy
// closed it).
func (lp *evloop) closeLocked(l *link, err error, abort bool) {
	for i := range l.dirs {
		if !l.dirs[i].ended {
			l.dirs[i].ended = true
			if err != nil {
				l.dirs[i].err = &net.OpError{Op: "splice", Net: "tcp", Err: err}
			}
		}
	}
	for side := range 2 {
		fd := l.lfd[side]
		if fd < 0 {
			continue
		}
		if abort {
			lingerZero(fd)
		}
		if l.kept[side] { // borrowed: out of the set, and closed by link.end with its conn
			epollSet(lp.ep, unix.EPOLL_CTL_DEL, fd, nil)
		} else {
			closeFD(fd)
		}
		l.lfd[side] = -1
		lp.dropPipe(l, side)
		l.blocked[side] = false
	}
	lp.freeSlot(l)
	lp.ended = append(lp.ended, l)
}

// freeSlot takes l out of its slot.
func (lp *evloop) freeSlot(l *link) {
	if l.lkey == 0 {
		return
	}
	lp.slots.release(l.lkey)
	l.lkey = 0
	lp.held--
	lp.load.Store(int32(lp.held))
}

// getPipe gives direction i of l an empty pipe: from the pool, or a new
// one; nil when none can be made.
func (lp *evloop) getPipe(l *link, i int) *splicePipe {
	var p *splicePipe
	if n := len(lp.pipes); n > 0 {
		p, lp.pipes = lp.pipes[n-1], lp.pipes[:n-1]
	} else {
		r, w, err := newPipe()
		if err != nil {
			return nil
		}
		p = &splicePipe{r: r, w: w}
	}
	l.pipe[i], l.own[i] = p, true
	return p
}

// putPipe gives direction i's pipe back, empty.
func (lp *evloop) putPipe(l *link, i int) {
	p := l.pipe[i]
	if p == nil {
		return
	}
	if p.n == 0 && l.own[i] && len(lp.pipes) < loopPipesKept {
		lp.pipes = append(lp.pipes, p)
	} else if l.own[i] {
		p.closeOwn()
	} // a pipe that came with a hand-over is closed by its cleanup
	l.pipe[i], l.own[i] = nil, false
}

// dropPipe closes direction i's pipe if it holds bytes, or gives it back.
func (lp *evloop) dropPipe(l *link, i int) {
	if p := l.pipe[i]; p != nil && p.n > 0 && l.own[i] {
		p.closeOwn()
		l.pipe[i], l.own[i] = nil, false
	}
	lp.putPipe(l, i)
}

// closeOwn closes a loop's pipe.
func (p *splicePipe) closeOwn() {
	unix.Close(p.r)
	unix.Close(p.w)
	p.r, p.w = -1, -1
}

// kill closes l from outside its loop (a rebalance, a drain, Shutdown):
// its end is reported as for conns closed by the proxy. It reports
// whether a loop held or is taking l.
func (l *link) kill() bool {
	lp := l.onLoop.Load()
	if lp == nil {
		return false
	}
	l.killed.Store(true)
	lp.mu.Lock()
	if l.lkey != 0 {
		lp.closeLocked(l, net.ErrClosed, false)
		lp.mu.Unlock()
		lp.wake() // the loop reports the end
		return true
	}
	lp.mu.Unlock()
	return true // attach sees killed
}

// detach takes l out of its loop for a hand-over, with its sockets and
// the bytes in flight (in l.dirs' pipes and pending), and reports whether
// it did; false: l has ended. The sockets stay open in l.lfd.
func (l *link) detach() bool {
	lp := l.onLoop.Load()
	if lp == nil {
		return false
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if l.lkey == 0 {
		return false
	}
	for side := range 2 {
		epollSet(lp.ep, unix.EPOLL_CTL_DEL, l.lfd[side], nil)
		if p := l.pipe[side]; p != nil && p.n > 0 {
			if l.own[side] { // the cleanup closes it from here on
				l.dirs[side].pipe = newSplicePipe(p.r, p.w, p.n)
			} else {
				l.dirs[side].pipe = p
			}
			l.pipe[side], l.own[side] = nil, false
		} else {
			lp.putPipe(l, side)
		}
		l.blocked[side] = false
	}
	lp.freeSlot(l)
	return true
}

// reattach puts a link detached for a hand-over that failed back on a
// loop, and reports whether it did.
func (ls *loops) reattach(l *link) bool {
	lp := l.onLoop.Load()
	if lp == nil || l.lfd[0] < 0 {
		return false
	}
	ls.rw.RLock()
	defer ls.rw.RUnlock()
	if ls.stopped {
		l.closeHeld()
		l.dirs[0].ended, l.dirs[1].ended = true, true
		l.end()
		return true
	}
	lp.mu.Lock()
	ok := lp.addLocked(l, l.lfd[0], l.lfd[1])
	lp.mu.Unlock()
	if !ok {
		lp.wake()
	}
	return true
}

// quiet reports whether a link detached for a hand-over is as a parked
// link is: both directions open, no byte in flight.
func (l *link) quiet() bool {
	for i := range l.dirs {
		if d := &l.dirs[i]; d.ended || d.pipe != nil || len(d.pending) > 0 {
			return false
		}
	}
	return true
}

// handedParked reports whether a link stopped by m moves as parked: a
// link an event loop held moves so only when it is quiet (the wire
// carries bytes in flight and half-closes only for a link that was
// copying).
func (m *mover) handedParked(l *link) bool {
	return m.parked[l] && (l.onLoop.Load() == nil || l.quiet())
}

// heldFDs returns the sockets of a detached link, for a hand-over.
func (l *link) heldFDs() (client, upstream int, ok bool) {
	return int(l.lfd[0]), int(l.lfd[1]), l.onLoop.Load() != nil && l.lfd[0] >= 0
}

// closeHeld closes the sockets of a link detached for a hand-over that
// committed.
func (l *link) closeHeld() {
	if l.onLoop.Load() == nil {
		return
	}
	for side := range 2 {
		if !l.kept[side] {
			closeFD(l.lfd[side])
		}
		l.lfd[side] = -1
	}
}

// idle returns how many connections the loops hold that have moved no
// byte for the loops' ParkAfter.
func (ls *loops) idle() int {
	if ls == nil {
		return 0
	}
	all := ls.all()
	n := 0
	for _, lp := range all {
		lp.mu.Lock()
		now := int64(time.Since(lp.epoch))
		for _, s := range lp.slots.slots {
			if l := s.l; l != nil && l.dl == nil && now-l.last.Load() >= int64(ls.after) && !l.blocked[0] && !l.blocked[1] {
				n++
			}
		}
		lp.mu.Unlock()
	}
	return n
}

// epollNow returns the events ready in the set ep, without waiting.
func epollNow(ep int, evs []unix.EpollEvent) int {
	for {
		r, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0
		}
		return int(r)
	}
}

// spliceNow splices up to n bytes from fd in to fd out without waiting.
func spliceNow(in, out, n int) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		if e == unix.EINTR {
			continue
		}
		return int(r), e
	}
}

// sendNow writes b to the socket fd without waiting.
func sendNow(fd int32, b []byte) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EINTR {
			continue
		}
		return int(r), e
	}
}

// askLooped is mover.ask for a link an event loop holds: it leaves the
// loop at once, with its bytes in flight, and moves as a parked link
// does (no goroutine waits for the outcome).
func (m *mover) askLooped(l *link) bool {
	if !l.detach() {
		return true // ended: left to end
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setState(linkMoving)
	m.takeStill(l)
	return true
}
