package pinproxy

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Dialing on the event loops. A client accepted as a bare socket by a
// loop (accept_linux.go) takes a slot on that loop, which dials its
// upstream at once, as HAProxy dials: a nonblocking socket, a
// connect(2) that returns EINPROGRESS, the socket in the loop's set for
// output readiness, and SO_ERROR read when it comes. The order is the
// proxy's own (Proxy.nextUpstream: least used first, an upstream that just
// failed last, MaxDialAttempts), and so is the bookkeeping of each
// attempt (dialFailed, dialAnswered): a connect refused, reset or not
// answered within DialTimeout goes on to the next upstream, as a dial in
// Go does. Each loop keeps its dials' deadlines in a queue, in the order
// they were made, which is their deadlines' order (one DialTimeout for
// all); the loop waits no longer than the first. Once connected, the
// PROXY header (if any) is written at once (a fresh socket's send buffer
// takes it whole), and the pair joins the loop's set to be relayed.
//
// An upstream given by name, not address, is dialed by Go's dialer in a
// goroutine of its own, which resolves it at each dial; its socket then
// joins the loop as a dialed one. Every decision that takes Proxy.mu is
// made without the loop's lock: by the loop after its batch (its
// accepts, loop.incoming, loop.dialed), or by the name's goroutine.

// dialing is a client's dial in progress on a loop.
type dialing struct {
	p     *Proxy
	lp    *evloop
	r     route
	spare int32        // a descriptor kept for the upstream's socket until the dial, or -1 (balance gave the client to another loop)
	u     *upstream    // the upstream dialed now
	now   time.Time    // when u was picked, on the proxy's clock
	raddr *net.TCPAddr // u's address, as dialed

	// Under lp.mu.
	seq      uint32        // the attempt, for its deadline's entry in the queue
	inSet    bool          // the upstream's socket is in the loop's set (its connect is the loop's)
	decided  bool          // the connect ended: errno or timedOut says how
	errno    syscall.Errno // the connect's error (SO_ERROR); 0: connected
	timedOut bool
	ready    uint32 // what else the connect's event said: input, the peer's close
}

// dialTimer is a connect's deadline, since the loop's epoch.
type dialTimer struct {
	key uint64
	seq uint32
	at  time.Duration
}

// dial takes the client accepted as fd on lp, which dials its upstream
// now: lp's goroutine calls it, after a batch of events, without lp.mu.
// A loop that holds clearly more connections than another (balance)
// gives the client to that one instead, which dials after its next
// batch. The client counts in starting (admit) until it relays or is
// closed. A measured A/B (proxybench -metrics connrate, 5 rounds) of the
// loop dialing against Serve's goroutine dialing: 7,089 against 6,758
// conn/s (HAProxy 6,913), 112 against 115 µs a connection.
func (ls *loops) dial(p *Proxy, lp *evloop, lps []*evloop, fd int32, client *heldConn) {
	to := balance(lp, lps)
	l := &link{client: client, bufs: &p.bufs}
	l.lfd = [2]int32{fd, -1}
	l.dl = &dialing{p: p, lp: to, spare: -1} // before its slot: idle reads it
	if to != lp {
		// The other loop dials after its next batch, and this one goes
		// on accepting meanwhile: a descriptor is kept for the client's
		// upstream, or a proxy running out of them would take clients
		// whose dials then find none, every one it gave away.
		spare, err := dupRaw(fd)
		if err != nil {
			to = lp
			l.dl.lp = to
		} else {
			l.dl.spare = spare
		}
	}
	l.onLoop.Store(to)
	ls.rw.RLock()
	ok, wake := false, false
	if !ls.stopped {
		ok, wake = to.hold(l, to != lp)
	}
	ls.rw.RUnlock()
	if !ok {
		closeFD(fd)
		if l.dl.spare >= 0 {
			closeFD(l.dl.spare)
		}
		p.dialEnded()
		return
	}
	ls.joined()
	switch {
	case to == lp:
		p.dialNext(l)
	case wake:
		to.wake()
	}
}

// balance returns the loop a client accepted on lp is to live on: lp,
// unless another of lps holds fewer connections by more than an eighth
// of lp's (then the one that holds the fewest). Few connections are so
// spread too: four streams that arrive together are two on each of two
// loops, not four on the one that woke first (a slack of 8 had them
// there, and their throughput was one core's: 900 against 1,500 MiB/s). Every idle loop is
// woken for a new client (accept_linux.go), and the first to look takes
// it, so without this one loop could end up holding most of a slow
// stream of long-lived connections; under load each loop keeps what it
// accepts, and no client moves. HAProxy's listeners likewise send a
// connection to the least loaded of two threads (listener.c).
func balance(lp *evloop, lps []*evloop) *evloop {
	n := lp.load.Load()
	best, least := lp, n-n/8
	for _, o := range lps {
		if m := o.load.Load(); m < least {
			best, least = o, m
		}
	}
	return best
}

// hold gives l a slot in lp, unless lp is stopping; queued: lp dials for
// it after its next batch (it came from another loop), and wake says lp
// waits for events, and must be woken.
func (lp *evloop) hold(l *link, queued bool) (ok, wake bool) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.stopping {
		return false, false
	}
	l.lkey = lp.slots.take(l)
	lp.held++
	lp.load.Store(int32(lp.held))
	if queued {
		lp.incoming = append(lp.incoming, l)
		wake = lp.sleeping && len(lp.incoming) == 1
	}
	return true, wake
}

// dialNext dials l's client's next upstream, until a connect is under
// way (the loop, or the name's goroutine, goes on from there) or none
// is left (the client is closed).
func (p *Proxy) dialNext(l *link) {
	d := l.dl
	if d.spare >= 0 { // for the socket this dial makes now
		closeFD(d.spare)
		d.spare = -1
	}
	for {
		u, now := p.nextUpstream(&d.r, l.client)
		if u == nil {
			p.dialGiveUp(l)
			return
		}
		d.u, d.now = u, now
		a := u.dialAddr()
		if a.tcp == nil {
			go p.dialByName(l)
			return
		}
		err := d.lp.connect(l, a)
		if err == nil {
			return
		}
		if !p.dialFailed(u, l.client, now, p.dialOutcome(u, l.client, err), err) {
			p.dialGiveUp(l)
			return
		}
	}
}

// dialAddr returns u's address as the loops dial it.
func (u *upstream) dialAddr() *dialAddr {
	if a := u.parsed.Load(); a != nil {
		return a
	}
	a := &dialAddr{}
	if ap, err := netip.ParseAddrPort(u.addr); err == nil && ap.Addr().Zone() == "" {
		a.ap, a.tcp = ap, net.TCPAddrFromAddrPort(ap)
	}
	u.parsed.Store(a) // two loops may both parse it first: either result does
	return a
}

// dialOutcome is what a client's failed dial to u came to, as attempt
// tells it.
func (p *Proxy) dialOutcome(u *upstream, client net.Conn, err error) outcome {
	return p.failure(p.killCtx, err, dialLocal, slog.String("client", client.RemoteAddr().String()), slog.String("upstream", u.addr))
}

// connect starts a nonblocking connect of l's upstream to ap, with the
// socket in lp's set; nil: under way (lp reports its end).
func (lp *evloop) connect(l *link, ua *dialAddr) error {
	d := l.dl
	ap := ua.ap
	d.raddr = ua.tcp
	a := ap.Addr().Unmap()
	fam := unix.AF_INET6
	if a.Is4() {
		fam = unix.AF_INET
	}
	fd, err := unix.Socket(fam, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: d.raddr, Err: os.NewSyscallError("socket", err)}
	}
	setNoDelay(int32(fd))
	if ka := d.p.keepAlive; ka.Enable && !d.p.kaLater() {
		setKeepAliveFD(fd, ka)
	}
	var e syscall.Errno
	if a.Is4() {
		sa := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.As4()}
		putPort(&sa.Port, ap.Port())
		_, _, e = syscall.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
	} else {
		sa := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.As16()}
		putPort(&sa.Port, ap.Port())
		_, _, e = syscall.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
	}
	if e != 0 && e != unix.EINPROGRESS {
		closeFD(int32(fd))
		return &net.OpError{Op: "dial", Net: "tcp", Addr: d.raddr, Err: os.NewSyscallError("connect", e)}
	}
	lp.mu.Lock()
	if lp.stopping || l.lkey == 0 {
		lp.mu.Unlock()
		closeFD(int32(fd))
		return &net.OpError{Op: "dial", Net: "tcp", Addr: d.raddr, Err: net.ErrClosed}
	}
	l.lfd[1] = int32(fd)
	d.seq++
	d.decided, d.errno, d.timedOut = false, 0, false
	at := lp.since() + d.p.cfg.DialTimeout
	// In the set for good, for what the relay waits for too: the pair
	// then costs one epoll_ctl fewer (relayLocked). Output readiness
	// stays in the mask, edge-triggered: it comes with other events, and
	// is acted on only while the other direction waits for room.
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLOUT | unix.EPOLLET}
	key := l.lkey | 1<<63
	ev.Fd, ev.Pad = int32(uint32(key)), int32(uint32(key>>32))
	if err := epollSet(lp.ep, unix.EPOLL_CTL_ADD, int32(fd), &ev); err != nil {
		l.lfd[1] = -1
		lp.mu.Unlock()
		closeFD(int32(fd))
		return &net.OpError{Op: "dial", Net: "tcp", Addr: d.raddr, Err: os.NewSyscallError("epoll_ctl", err)}
	}
	d.inSet = true
	lp.dialQ = append(lp.dialQ, dialTimer{key: l.lkey, seq: d.seq, at: at})
	// A loop asleep with no deadline as early as this one's is woken to
	// set it; all dials have one timeout, so under load the loop's
	// deadline is an earlier dial's and nobody is woken.
	wake := lp.sleeping && (lp.armed == 0 || lp.armed > at)
	lp.mu.Unlock()
	if wake {
		lp.wake()
	}
	return nil
}

// putPort writes a port in network byte order.
func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

// connectEvent is an event on l's connecting upstream, events: its
// connect ended. Output readiness alone says it connected, as HAProxy
// reads it (sock_conn_check); SO_ERROR is read only when the event
// carries an error or a hang-up. Call with lp.mu held.
func (lp *evloop) connectEvent(l *link, events uint32) {
	d := l.dl
	if d.decided || !d.inSet {
		return
	}
	var e syscall.Errno
	if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 || events&unix.EPOLLOUT == 0 {
		v := int32(0)
		n := uint32(4)
		_, _, e = syscall.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(l.lfd[1]), unix.SOL_SOCKET, unix.SO_ERROR, uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&n)), 0)
		if e == 0 {
			e = syscall.Errno(v)
		}
	}
	if e == 0 {
		d.ready = events & (unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR)
	}
	lp.decide(l, e, false)
}

// decide records how l's connect ended, for dialDecided after the batch;
// a failed connect's socket is closed. Call with lp.mu held.
func (lp *evloop) decide(l *link, e syscall.Errno, timedOut bool) {
	d := l.dl
	d.decided, d.errno, d.timedOut = true, e, timedOut
	if e != 0 || timedOut {
		closeFD(l.lfd[1])
		l.lfd[1] = -1
		d.inSet = false
	}
	lp.dialed = append(lp.dialed, l)
}

// expireDials ends the connects whose deadline has passed at now, or all
// of them once lp is stopping. Call with lp.mu held.
func (lp *evloop) expireDials(now time.Duration) {
	for len(lp.dialQ) > 0 {
		t := lp.dialQ[0]
		if t.at > now && !lp.stopping {
			return
		}
		lp.dialQ = lp.dialQ[1:]
		l := lp.slots.lookup(t.key)
		if l == nil || l.dl == nil || l.dl.seq != t.seq || l.dl.decided || !l.dl.inSet {
			continue
		}
		lp.decide(l, 0, true)
	}
	lp.dialQ = lp.dialQ[:0:0] // let the queue's array go with its last entry
}

// dialDecided goes on from a connect the loop saw end: the pair relays,
// or the client's next upstream is dialed. Called without lp.mu.
func (p *Proxy) dialDecided(l *link) {
	d := l.dl
	if d.errno == 0 && !d.timedOut {
		p.dialUp(l)
		return
	}
	var err error
	if d.timedOut {
		err = &net.OpError{Op: "dial", Net: "tcp", Addr: d.raddr, Err: os.ErrDeadlineExceeded}
	} else {
		err = &net.OpError{Op: "dial", Net: "tcp", Addr: d.raddr, Err: os.NewSyscallError("connect", d.errno)}
	}
	if p.dialFailed(d.u, l.client, d.now, p.dialOutcome(d.u, l.client, err), err) {
		p.dialNext(l)
		return
	}
	p.dialGiveUp(l)
}

// dialByName dials l's upstream, an address given by name, with Go's
// dialer (which resolves it), and hands the socket to l's loop.
func (p *Proxy) dialByName(l *link) {
	d := l.dl
	uc, out, err := p.attempt(p.killCtx, d.u, p.cfg.DialTimeout, dialLocal,
		slog.String("client", l.client.RemoteAddr().String()), slog.String("upstream", d.u.addr))
	if out == answered {
		fd := int32(-1)
		if tc, ok := uc.(*net.TCPConn); ok {
			fd, err = dupConn(tc, false)
		} else {
			err = &net.OpError{Op: "dial", Net: "tcp", Addr: uc.RemoteAddr(), Err: syscall.EINVAL}
		}
		ra, _ := uc.RemoteAddr().(*net.TCPAddr)
		uc.Close()
		if err == nil {
			d.lp.mu.Lock()
			l.lfd[1] = fd
			d.raddr, d.inSet, d.decided = ra, false, true
			d.lp.mu.Unlock()
			p.dialUp(l)
			return
		}
		out = noResources
	}
	if p.dialFailed(d.u, l.client, d.now, out, err) {
		p.dialNext(l)
		return
	}
	p.dialGiveUp(l)
}

// loopedConn is a conn the loops dialed for, with its upstream's
// heldConn: one allocation.
type loopedConn struct {
	conn
	uc heldConn
}

// dialUp links the pair whose upstream answered, writes the PROXY
// header, and has the loop relay it.
func (p *Proxy) dialUp(l *link) {
	d := l.dl
	u, lp := d.u, d.lp
	lc := &loopedConn{conn: conn{client: l.client, up: u, start: d.now, link: l}, uc: heldConn{raddr: d.raddr}}
	c := &lc.conn
	c.upstream, l.upstream = &lc.uc, &lc.uc
	l.dirs[0].total, l.dirs[1].total = &u.bytes.up, &u.bytes.down
	l.done = func(r spliceResult) { p.finish(c, r) }
	l.kaPending.Store(p.kaLater())
	c.looped.Store(l) // before it is linked: a round may close it from then on
	if !p.dialAnswered(c) {
		p.dialGiveUp(l)
		return
	}
	var hdr []byte
	if p.cfg.SendProxy != 0 {
		hdr = proxyHeader(p.cfg.SendProxy, l.client.RemoteAddr(), l.client.LocalAddr())
	}
	lp.mu.Lock()
	ok := lp.relayLocked(l, hdr)
	lp.mu.Unlock()
	if !ok {
		lp.wake() // the loop reports its end
	}
	p.starting.Add(-1)
}

// relayLocked writes hdr to l's upstream and puts the pair in lp's set to
// be relayed; false: l has ended (its end is queued). A link closed from
// outside meanwhile (link.kill) has ended already.
func (lp *evloop) relayLocked(l *link, hdr []byte) bool {
	d := l.dl
	l.dl = nil
	if l.lkey == 0 {
		return true
	}
	if len(hdr) > 0 {
		n, e := sendNow(l.lfd[1], hdr)
		if e != 0 || n < len(hdr) {
			err := error(io.ErrShortWrite)
			if e != 0 {
				err = os.NewSyscallError("write", e)
			}
			l.dirs[0].ended, l.dirs[0].err = true, proxyHeaderError(d.u.addr, err)
			lp.closeLocked(l, nil, false)
			return false
		}
	}
	l.outOn = [2]bool{}
	l.last.Store(int64(lp.since()))
	l.setState(linkLooped)
	ops := [2]int{unix.EPOLL_CTL_ADD, unix.EPOLL_CTL_ADD}
	if d.inSet { // in the set already, with output readiness (connect)
		ops[1], l.outOn[1] = ctlNone, true
	}
	if !lp.joinLocked(l, ops) {
		return false
	}
	// What came with the connect's event was not read then, and its edge
	// will not come again: the upstream's first bytes, or its close.
	if d.ready != 0 {
		if d.ready&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			l.hup[1] = true
		}
		lp.pump(l, 1)
		if l.lkey == 0 {
			return false
		}
	}
	return true
}

// dialGiveUp closes a client whose dial gave up, and its upstream's
// socket if one is open.
func (p *Proxy) dialGiveUp(l *link) {
	lp := l.dl.lp
	lp.mu.Lock()
	for side := range 2 {
		closeFD(l.lfd[side])
		l.lfd[side] = -1
	}
	lp.freeSlot(l)
	stopping := lp.stopping
	lp.mu.Unlock()
	if stopping {
		lp.wake() // it may have been waiting for this slot
	}
	p.dialEnded()
}

// dialEnded uncounts a client closed before it relayed.
func (p *Proxy) dialEnded() {
	p.active.Add(-1)
	p.handlers.Done()
	p.starting.Add(-1)
}
