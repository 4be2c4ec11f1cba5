package main

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The "epoll floor" target: the least per-connection work a proxy written in
// Go can do on Linux, as a yardstick for the connection-rate target. It is
// what HAProxy does, in Go: one event loop per CPU (GOMAXPROCS), each with
// its own epoll set (the listening socket is in every set with
// EPOLLEXCLUSIVE), no goroutine, no net.Conn and no runtime netpoller per
// connection, non-blocking raw syscalls (no entersyscall, so the runtime
// never hands a loop's P to another thread while a connect or close does its
// loopback softirq work), the upstream socket set up as pinproxy's is (TCP
// keepalive with idle and interval 30 s, TCP_NODELAY), round-robin over
// upstreams given as IP:port. Bytes move through one user-space buffer per
// loop; a write that cannot finish keeps its remainder and pauses reading the
// other side until the socket drains (EPOLLOUT), so no byte is lost. Half-close
// is carried through as pinproxy does.
//
// What it leaves out, so it is a floor and not a product: name resolution,
// failover to another upstream, dial timeouts, rebalancing, draining on stop,
// statistics, splice. Everything pinproxy must do beyond this costs more.

// floorKeepAlive is the keepalive idle time and interval, in seconds, of the
// floor's upstream sockets: pinproxy's default (Config.KeepAlive, 30 s).
const floorKeepAlive = 30

// floorBuf is the size of each loop's copy buffer.
const floorBuf = 64 << 10

// floorProxy is a running epoll-floor proxy.
type floorProxy struct {
	lfd   int
	port  int
	loops []*floorLoop
	wg    sync.WaitGroup
}

// floorLoop is one event loop: an epoll set, the connections it owns, and an
// eventfd that stops it.
type floorLoop struct {
	ep, lfd, stopfd int
	ups             []unix.RawSockaddrInet4
	next            int
	conns           map[int32]*floorConn
	buf             []byte
}

// floorConn is one socket of a proxied pair.
type floorConn struct {
	fd         int32
	peer       *floorConn
	connecting bool   // upstream connect not finished yet (nothing is written until it is)
	pending    []byte // bytes read from peer, not yet written to fd
	eof        bool   // fd's read side ended
	// ended: epoll reported fd's peer done sending (EPOLLRDHUP), or HUP or
	// ERR. A FIN that arrives with the last bytes shares their edge, so a
	// short read is then no sign that nothing is left: read on to EOF.
	ended bool
}

// serveFloor starts the floor on 127.0.0.1, an ephemeral port, in front of
// upstreams (IPv4 IP:port).
func serveFloor(upstreams []string) (*floorProxy, error) {
	var ups []unix.RawSockaddrInet4
	for _, u := range upstreams {
		ap, err := netip.ParseAddrPort(u)
		if err != nil || !ap.Addr().Is4() {
			return nil, fmt.Errorf("floor: upstream %q: want IPv4 IP:port", u)
		}
		sa := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: ap.Addr().As4()}
		// sin_port is in network byte order.
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		p[0], p[1] = byte(ap.Port()>>8), byte(ap.Port())
		ups = append(ups, sa)
	}
	if len(ups) == 0 {
		return nil, errors.New("floor: no upstreams")
	}
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("floor: socket: %w", err)
	}
	f := &floorProxy{lfd: lfd}
	fail := func(op string, err error) (*floorProxy, error) {
		f.stop()
		return nil, fmt.Errorf("floor: %s: %w", op, err)
	}
	if err := unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("setsockopt SO_REUSEADDR", err)
	}
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fail("bind", err)
	}
	if err := unix.Listen(lfd, 4096); err != nil {
		return fail("listen", err)
	}
	sa, err := unix.Getsockname(lfd)
	if err != nil {
		return fail("getsockname", err)
	}
	f.port = sa.(*unix.SockaddrInet4).Port
	for i := range runtime.GOMAXPROCS(0) {
		l := &floorLoop{lfd: lfd, ups: ups, next: i, conns: map[int32]*floorConn{}, buf: make([]byte, floorBuf), ep: -1, stopfd: -1}
		f.loops = append(f.loops, l)
		if l.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
			return fail("epoll_create1", err)
		}
		if l.stopfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			return fail("eventfd", err)
		}
		if err := l.add(lfd, unix.EPOLLIN|unix.EPOLLEXCLUSIVE); err != nil {
			return fail("epoll_ctl listener", err)
		}
		if err := l.add(l.stopfd, unix.EPOLLIN); err != nil {
			return fail("epoll_ctl eventfd", err)
		}
	}
	for _, l := range f.loops {
		f.wg.Go(l.run)
	}
	return f, nil
}

// addr is the address clients connect to.
func (f *floorProxy) addr() string { return fmt.Sprintf("127.0.0.1:%d", f.port) }

// stop ends the loops, closes every connection and the listener.
func (f *floorProxy) stop() {
	one := uint64(1)
	for _, l := range f.loops {
		if l.stopfd >= 0 {
			unix.Write(l.stopfd, (*[8]byte)(unsafe.Pointer(&one))[:])
		}
	}
	f.wg.Wait()
	for _, l := range f.loops {
		for fd := range l.conns {
			unix.Close(int(fd))
		}
		for _, fd := range []int{l.ep, l.stopfd} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
	unix.Close(f.lfd)
}

func (l *floorLoop) add(fd int, events uint32) error {
	return unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)})
}

func (l *floorLoop) run() {
	evs := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(l.ep, evs, -1)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		// New clients are taken after the batch: an accept could reuse the
		// number of an fd closed earlier in the batch, and a later event of
		// the batch for the old socket would then reach the new one.
		accept := false
		for _, ev := range evs[:n] {
			switch int(ev.Fd) {
			case l.stopfd:
				return
			case l.lfd:
				accept = true
				continue
			}
			c := l.conns[ev.Fd]
			if c == nil {
				continue // closed earlier in this batch
			}
			if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				c.ended = true
			}
			if ev.Events&unix.EPOLLOUT != 0 && !l.writable(c, ev.Events) {
				continue
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				l.readFrom(c)
			}
		}
		if accept {
			l.accept()
		}
	}
}

// rawCall is a syscall that never blocks (non-blocking sockets), made
// without telling the scheduler, as an event loop in C makes it. It is for
// calls whose arguments hold no pointer: one that passes a Go pointer must
// call syscall.RawSyscall6 itself, with the uintptr(unsafe.Pointer(…))
// conversion in that call's arguments, so the object stays put and alive.
func rawCall(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, syscall.Errno) {
	r, _, e := syscall.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	return r, e
}

func setInt(fd int32, level, opt, v int) {
	v32 := int32(v)
	syscall.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v32)), 4, 0)
}

// accept takes every pending client and starts its upstream's connect.
func (l *floorLoop) accept() {
	for {
		r, e := rawCall(unix.SYS_ACCEPT4, uintptr(l.lfd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		if e != 0 {
			return // EAGAIN: another loop took it, or none is left
		}
		cfd := int32(r)
		setInt(cfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		r, e = rawCall(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0, 0, 0)
		if e != 0 {
			rawCall(unix.SYS_CLOSE, uintptr(cfd), 0, 0, 0, 0, 0)
			continue
		}
		ufd := int32(r)
		setInt(ufd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		setInt(ufd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
		setInt(ufd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, floorKeepAlive)
		setInt(ufd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, floorKeepAlive)
		sa := &l.ups[l.next%len(l.ups)]
		l.next++
		_, _, e = syscall.RawSyscall(unix.SYS_CONNECT, uintptr(ufd), uintptr(unsafe.Pointer(sa)), unsafe.Sizeof(*sa))
		if e != 0 && e != unix.EINPROGRESS {
			rawCall(unix.SYS_CLOSE, uintptr(cfd), 0, 0, 0, 0, 0)
			rawCall(unix.SYS_CLOSE, uintptr(ufd), 0, 0, 0, 0, 0)
			continue
		}
		c := &floorConn{fd: cfd}
		u := &floorConn{fd: ufd, peer: c, connecting: e != 0}
		c.peer = u
		l.conns[cfd], l.conns[ufd] = c, u
		const et = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET
		if l.add(int(cfd), et) != nil || l.add(int(ufd), et) != nil {
			l.closePair(c)
		}
	}
}

// readFrom moves what c's socket has to its peer, until c has nothing
// more, the peer cannot take more, or c's stream ends.
func (l *floorLoop) readFrom(c *floorConn) {
	p := c.peer
	for !c.eof && !p.connecting && len(p.pending) == 0 {
		r, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, uintptr(c.fd), uintptr(unsafe.Pointer(&l.buf[0])), uintptr(len(l.buf)), 0, 0, 0)
		switch {
		case e == unix.EAGAIN:
			return
		case e != 0:
			l.closePair(c)
			return
		case r == 0:
			c.eof = true
			if p.eof {
				l.closePair(c)
				return
			}
			rawCall(unix.SYS_SHUTDOWN, uintptr(p.fd), unix.SHUT_WR, 0, 0, 0, 0)
			return
		}
		if !l.send(p, l.buf[:r]) {
			return
		}
		if int(r) < len(l.buf) && !c.ended {
			return // drained; the next edge brings more
		}
	}
}

// send writes b to c, keeping what the socket does not take in
// c.pending. It reports whether all of b went out; false also when the pair
// was closed on an error.
func (l *floorLoop) send(c *floorConn, b []byte) bool {
	for len(b) > 0 {
		r, _, e := syscall.RawSyscall6(unix.SYS_SENDTO, uintptr(c.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN {
			c.pending = append(c.pending[:0], b...)
			return false
		}
		if e != 0 {
			l.closePair(c)
			return false
		}
		b = b[r:]
	}
	return true
}

// writable handles EPOLLOUT on c: the end of its connect, or room for its
// pending bytes; then the peer, which waited for c, is read again. (EOF is
// read from the peer only once c has nothing pending, so a half-close never
// waits here.) It reports whether c is still open.
func (l *floorLoop) writable(c *floorConn, events uint32) bool {
	switch {
	case c.connecting: // nothing is pending yet: the peer is not read until the connect ends
		if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			l.closePair(c)
			return false
		}
		c.connecting = false
	case len(c.pending) == 0:
		return true // nothing waited for room
	default:
		// send keeps what the socket does not take in c.pending again,
		// moved to the front of the same array: no allocation per
		// EAGAIN.
		b := c.pending
		c.pending = c.pending[:0]
		if !l.send(c, b) {
			return l.conns[c.fd] == c
		}
	}
	l.readFrom(c.peer)
	return l.conns[c.fd] == c
}

// closePair closes both sockets of c's pair (close removes them from the
// epoll set).
func (l *floorLoop) closePair(c *floorConn) {
	for _, x := range []*floorConn{c, c.peer} {
		if l.conns[x.fd] == x {
			delete(l.conns, x.fd)
			rawCall(unix.SYS_CLOSE, uintptr(x.fd), 0, 0, 0, 0, 0)
		}
	}
}
