package pinproxy

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Accepting on the event loops. With the loops on, a TCP listener's
// clients are taken as bare sockets: accept4(2), nonblocking, as many as
// are queued at each wake-up, with no net.Conn, no registration in the
// runtime's netpoller and no goroutine per client. The listening socket
// (a duplicate of it) is in every loop's epoll set, as the epoll floor
// in internal/tools/proxybench has it, and a loop woken for it accepts
// the clients, admits them and dials their upstreams itself
// (connect_linux.go): a client never moves from one thread to another,
// and no other goroutine is woken for it. HAProxy accepts the same way,
// from every thread's poller. The listener is in the sets with
// EPOLLEXCLUSIVE, but a loop's set is itself watched by the runtime's
// netpoller rather than waited on by a thread, and the kernel then wakes
// every idle loop: the first takes the clients, the others find none
// (0.4 accept4 per connection that return EAGAIN, against the floor's
// 0.3, whose threads wait in epoll_wait).
//
// Serve's goroutine waits meanwhile for what ends or pauses the accepts:
// Shutdown, a hand-over's hold (the listener leaves the loops' sets, and
// Serve waits for the hold to end as before), an accept error a loop
// reports (out of descriptors: the listener leaves the sets for Serve's
// back-off, then joins them again), or its owner's close of the listener,
// which the duplicate cannot see: Serve looks every liveCheck.
//
// Measured with proxybench's CPU profile and strace of a connection-rate
// run (docs/benchmarks.md, the connection rate): accepting on Serve's
// goroutine and handing each client to a loop cost an eventfd write and
// read and a wake-up of the loop's goroutine per client or batch, and
// with accept and dial in Go, before the loops, 27 % of the proxy's CPU
// was user-space Go (the floor's: 6 %).

// rawBatch is the most clients one wake-up of a loop accepts from one
// listener.
const rawBatch = 64

// rawListener is a TCP listener the loops accept from as bare sockets.
type rawListener struct {
	p       *Proxy
	ln      net.Listener
	lrc     syscall.RawConn // the listener's: to see it is still open
	fd      int32           // the duplicate in the loops' sets
	id      uint32          // its key in the loops' sets
	lps     []*evloop       // every loop, each with fd in its set while on
	laddr   *net.TCPAddr    // the clients' local address; nil: the listener's is unspecified (read it per client)
	preset  bool            // the clients' keepalive is set already (inherited from a listener made by Listen)
	nodelay bool            // the clients inherit TCP_NODELAY from the listening socket

	// paused: the loops take no client (a hold, Shutdown, an error, or
	// not in the sets yet). took: a loop took a client since the
	// listener last joined the sets.
	paused atomic.Bool
	took   atomic.Bool
	mu     sync.Mutex // on: fd is in the loops' sets
	on     bool
	// use is read-held by a loop taking a batch of clients from fd, and
	// held by close while it closes fd: no accept4 reaches a descriptor
	// number reused since.
	use  sync.RWMutex
	errc chan error    // an accept error a loop hit (cap 1)
	kick chan struct{} // a hold or Shutdown paused it (cap 1)
	stop func() bool   // ends the Shutdown watch
}

// liveCheck is how often Serve, waiting while the loops accept, looks
// whether its listener was closed.
const liveCheck = time.Second

// rawListener returns ln as a rawListener when the proxy's loops relay
// and dial (the loops are on, dials are the proxy's own) and ln is a
// *net.TCPListener; nil otherwise.
func (p *Proxy) rawListener(ln net.Listener, preset bool) *rawListener {
	tl, ok := ln.(*net.TCPListener)
	if p.loops == nil || p.cfg.DialContext != nil || !ok {
		return nil
	}
	lrc, err := tl.SyscallConn()
	if err != nil {
		return nil
	}
	lps := p.loops.startAll()
	if lps == nil {
		return nil
	}
	dfd, err := dupFD(tl)
	if err != nil {
		return nil
	}
	r := &rawListener{p: p, ln: ln, lrc: lrc, fd: int32(dfd), lps: lps, preset: preset,
		errc: make(chan error, 1), kick: make(chan struct{}, 1)}
	r.paused.Store(true)
	// TCP_NODELAY, which net sets on every TCP conn, is set once on the
	// listening socket: Linux copies it to each socket accepted from it,
	// so no client costs a setsockopt for it.
	lrc.Control(func(fd uintptr) { r.nodelay = setNoDelay(int32(fd)) == 0 })
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsUnspecified() {
		r.laddr = a
	}
	r.id = p.loops.listening(r)
	p.upg.mu.Lock()
	if p.upg.raws == nil {
		p.upg.raws = make(map[net.Listener]*rawListener)
	}
	p.upg.raws[ln] = r
	p.upg.mu.Unlock()
	r.stop = context.AfterFunc(p.stopCtx, r.pause)
	return r
}

// close ends r's use of its listener; Serve calls it as it returns.
func (r *rawListener) close() {
	if r == nil {
		return
	}
	r.stop()
	r.pause()
	r.use.Lock()
	closeFD(r.fd)
	r.use.Unlock()
	r.p.loops.unlisten(r)
	r.p.upg.mu.Lock()
	delete(r.p.upg.raws, r.ln)
	r.p.upg.mu.Unlock()
}

// resume puts r's listener in every loop's set, so the loops take its
// clients, unless a hand-over holds the accepts or Shutdown was called:
// then it fails with a deadline, as Accept would. Both are looked at
// under r.mu, which their pause takes after it was set, so a pause is
// never undone by a resume that came before it.
func (r *rawListener) resume() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p.upg.mu.Lock()
	held := r.p.upg.held != nil
	r.p.upg.mu.Unlock()
	if held || r.p.stopCtx.Err() != nil {
		return os.ErrDeadlineExceeded
	}
	if r.on {
		return nil
	}
	r.took.Store(false)
	r.paused.Store(false)
	for i, lp := range r.lps {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(r.id)}
		err := epollSet(lp.ep, unix.EPOLL_CTL_ADD, r.fd, &ev)
		if err == unix.EINVAL { // a kernel before 4.5: every loop wakes
			ev.Events = unix.EPOLLIN
			err = epollSet(lp.ep, unix.EPOLL_CTL_ADD, r.fd, &ev)
		}
		if err != nil {
			r.paused.Store(true)
			for _, lp := range r.lps[:i] {
				epollSet(lp.ep, unix.EPOLL_CTL_DEL, r.fd, nil)
			}
			return os.NewSyscallError("epoll_ctl", err)
		}
	}
	r.on = true
	return nil
}

// pause takes r's listener out of the loops' sets: they take no more of
// its clients (one taking a batch now finishes it). Clients that connect
// meanwhile wait in the listen queue.
func (r *rawListener) pause() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused.Store(true)
	if !r.on {
		return
	}
	r.on = false
	for _, lp := range r.lps {
		epollSet(lp.ep, unix.EPOLL_CTL_DEL, r.fd, nil)
	}
}

// holdRaw pauses the loops' accepts from ln, if they take its clients, and
// has Serve's accept return (a deadline, as for Accept), for holdAccepts.
func (p *Proxy) holdRaw(ln net.Listener) {
	p.upg.mu.Lock()
	r := p.upg.raws[ln]
	p.upg.mu.Unlock()
	if r != nil {
		r.pause()
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// accept has the loops take r's clients until something ends or pauses
// that, and returns the error it comes to, as Accept's: a deadline (a
// hold, Shutdown), a loop's accept error (out of descriptors), or the
// listener's close.
func (r *rawListener) accept() error {
	t := time.NewTimer(liveCheck)
	defer t.Stop()
	for {
		if err := r.resume(); err != nil {
			return r.opError(err)
		}
		select {
		case err := <-r.errc:
			return r.opError(err)
		case <-r.kick:
		case <-r.p.stopCtx.Done():
		case <-t.C:
			if cerr := r.lrc.Control(func(uintptr) {}); cerr != nil {
				r.pause()
				return r.opError(cerr)
			}
			t.Reset(liveCheck)
		}
	}
}

// room reports whether this process has a descriptor free for a client
// and one for its upstream's socket: two duplicates of the listener are
// made and closed. A nil r (Serve accepts net.Conns) has room.
func (r *rawListener) room() bool {
	if r == nil {
		return true
	}
	a, err := dupRaw(r.fd)
	if err != nil {
		return false
	}
	defer closeFD(a)
	b, err := dupRaw(r.fd)
	if err != nil {
		return false
	}
	closeFD(b)
	return true
}

// accepted reports whether a loop took a client since the listener last
// joined the loops' sets: Serve's back-off starts over.
func (r *rawListener) accepted() bool { return r != nil && r.took.Load() }

func (r *rawListener) opError(err error) error {
	return &net.OpError{Op: "accept", Net: "tcp", Addr: r.ln.Addr(), Err: err}
}

// pauseAccepts pauses every listener the loops accept from, for Serve's
// back-off, as an accept error does: a dial (a client's, a check's)
// found this host out of descriptors or memory, and a client taken now
// would find none for its upstream's socket either.
func (p *Proxy) pauseAccepts(err error) {
	p.upg.mu.Lock()
	rs := make([]*rawListener, 0, len(p.upg.raws))
	for _, r := range p.upg.raws {
		rs = append(rs, r)
	}
	p.upg.mu.Unlock()
	for _, r := range rs {
		r.failed(err)
	}
}

// failed pauses r on an accept error a loop hit, and passes it to Serve.
func (r *rawListener) failed(err error) {
	r.pause()
	select {
	case r.errc <- err:
	default:
	}
}

// acceptOn takes the clients queued on r, at most rawBatch, on lp, and
// admits each: it then counts in starting and lp dials its upstream, or
// it is closed. lp calls it after a batch of events, without lp.mu.
//
// Each client is dialed for (or given to the loop that dials for it)
// before the next is accepted, so a proxy out of file descriptors closes
// few clients: those whose accept took the last descriptors and whose
// upstream's socket found none. The first such dial pauses the
// listeners (pauseAccepts) for Serve's back-off, as an accept that finds
// none does; Serve takes them up again once there is room for a client
// and its upstream (room), and the clients behind wait in the listen
// queue meanwhile. Accepting the whole batch first had the dials fail
// for every client past the last descriptor, each closed (up to
// rawBatch at a time, the first clients among them).
func (r *rawListener) acceptOn(lp *evloop) {
	p := r.p
	// Counted in accepting before paused is read: a hold, which pauses r
	// before it waits for accepting to be zero, then waits for this batch.
	p.accepting.Add(1)
	defer p.accepting.Add(-1)
	r.use.RLock()
	defer r.use.RUnlock()
	if r.paused.Load() {
		return
	}
	sa := &lp.asa
	for range rawBatch {
		sl := uint32(unix.SizeofSockaddrAny)
		s, _, e := syscall.RawSyscall6(unix.SYS_ACCEPT4, uintptr(r.fd), uintptr(unsafe.Pointer(sa)), uintptr(unsafe.Pointer(&sl)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		if e == unix.EINTR || e == unix.ECONNABORTED { // a client that left while queued
			continue
		}
		if e != 0 {
			if e != unix.EAGAIN {
				r.failed(os.NewSyscallError("accept4", e))
			}
			return
		}
		r.took.Store(true)
		p.acceptFD(lp, r.lps, int32(s), r.clientConn(int32(s), sa), r.preset, r.nodelay)
		if r.paused.Load() { // its dial found no descriptor (pauseAccepts), or a hold
			return
		}
	}
}

// clientConn is the addresses of the client accepted as fd, from sa.
func (r *rawListener) clientConn(fd int32, sa *unix.RawSockaddrAny) *heldConn {
	c := heldClient(sa)
	if r.laddr != nil {
		c.laddr = r.laddr
	} else if lsa, err := unix.Getsockname(int(fd)); err == nil {
		c.laddr = sockaddrTCP(lsa)
	}
	return c
}

// acceptFD admits the client accepted as the bare socket fd on lp, one
// of lps, and starts its dial there (or on a loop that holds fewer); a
// client not admitted is closed. nodelay: fd has TCP_NODELAY already,
// from its listener.
func (p *Proxy) acceptFD(lp *evloop, lps []*evloop, fd int32, client *heldConn, preset, nodelay bool) {
	if !p.admit(client) {
		closeFD(fd)
		return
	}
	if !nodelay {
		setNoDelay(fd) // as net sets it on every TCP conn
	}
	if !preset && p.keepAlive.Enable {
		setKeepAliveFD(int(fd), p.keepAlive)
	}
	p.loops.dial(p, lp, lps, fd, client)
}

func setNoDelay(fd int32) syscall.Errno {
	one := int32(1)
	_, _, e := syscall.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, uintptr(unsafe.Pointer(&one)), 4, 0)
	return e
}

// heldConn stands for a socket an event loop holds as a bare descriptor:
// it keeps the socket's addresses, for the log line, the PROXY header and
// the admin endpoints. The loop reads, writes and closes the socket;
// heldConn's own I/O methods fail with net.ErrClosed, and its Close does
// nothing.
type heldConn struct {
	laddr, raddr *net.TCPAddr
}

var _ net.Conn = (*heldConn)(nil)

// heldClientConn is a client's heldConn with its remote address inside,
// so the three are one allocation.
type heldClientConn struct {
	heldConn
	raddr net.TCPAddr
	ip    [16]byte
}

// heldClient returns the heldConn of a client accepted from sa, its
// remote address set as net sets it from an accept; nil raddr if sa is
// not IP.
func heldClient(sa *unix.RawSockaddrAny) *heldConn {
	h := &heldClientConn{}
	a := &h.raddr
	switch sa.Addr.Family {
	case unix.AF_INET:
		s := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		copy(h.ip[:], s.Addr[:])
		a.IP, a.Port = h.ip[:4], int(netPort(&s.Port))
	case unix.AF_INET6:
		s := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
		h.ip = s.Addr
		a.IP, a.Port, a.Zone = h.ip[:], int(netPort(&s.Port)), zoneName(s.Scope_id)
	default:
		a = nil
	}
	h.heldConn.raddr = a
	return &h.heldConn
}

func (c *heldConn) Read([]byte) (int, error)  { return 0, net.ErrClosed }
func (c *heldConn) Write([]byte) (int, error) { return 0, net.ErrClosed }
func (c *heldConn) Close() error              { return nil }

func (c *heldConn) LocalAddr() net.Addr {
	if c.laddr == nil {
		return nil
	}
	return c.laddr
}

func (c *heldConn) RemoteAddr() net.Addr {
	if c.raddr == nil {
		return nil
	}
	return c.raddr
}

func (c *heldConn) SetDeadline(time.Time) error      { return nil }
func (c *heldConn) SetReadDeadline(time.Time) error  { return nil }
func (c *heldConn) SetWriteDeadline(time.Time) error { return nil }

// sockaddrTCP is the TCP address of a unix.Sockaddr.
func sockaddrTCP(sa unix.Sockaddr) *net.TCPAddr {
	switch s := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: append(net.IP(nil), s.Addr[:]...), Port: s.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: append(net.IP(nil), s.Addr[:]...), Port: s.Port, Zone: zoneName(s.ZoneId)}
	}
	return nil
}

// netPort reads a port in network byte order.
func netPort(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// zoneName names the interface of an IPv6 scope id, as net does.
func zoneName(id uint32) string {
	if id == 0 {
		return ""
	}
	if ifi, err := net.InterfaceByIndex(int(id)); err == nil {
		return ifi.Name
	}
	return strconv.Itoa(int(id))
}
