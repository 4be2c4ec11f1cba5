package pinproxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Accepting for the event loops. With the loops on, Serve takes a TCP
// listener's clients as bare sockets: accept4(2) on the listening socket,
// nonblocking, as many as are queued at each wake-up, with no net.Conn, no
// registration in the runtime's netpoller and no goroutine per client.
// The listening socket itself stays in the netpoller (one registration per
// listener, not per client), so Serve's goroutine waits there, and a
// hand-over holds its accepts with a deadline as before (Proxy.Handoff).
// Each client is admitted as any other, then dialed for on a loop
// (connect_linux.go).
//
// Measured with internal/tools/proxybench's CPU profile of a
// connection-rate run (docs/benchmarks.md, the connection rate): with
// accept and dial in Go, 27 % of pinproxy's CPU was user-space Go (the
// epoll floor's: 6 %), a third of it in net's accept and dial (netFD,
// poll descriptors, the dialer's context and stack growth), the rest in
// moving the sockets onto a loop and scheduling the goroutine between.

// rawBatch is the most clients one wake-up of Serve accepts before it
// admits them.
const rawBatch = 64

// rawListener is a TCP listener Serve accepts from as bare sockets.
//
// net's listeners offer no wait without an accept (their RawConn's Read
// fails), so Serve waits on a duplicate of the listening socket, made an
// *os.File, which the netpoller watches as it watches the listener: the
// same socket, one registration. Its deadline stands in for the
// listener's: a hand-over's hold sets both (holdAccepts), and Shutdown
// sets it. A listener closed by its owner directly, which the duplicate
// cannot see, is found within liveCheck, when the duplicate's deadline
// has Serve look whether the listener is still open.
type rawListener struct {
	p       *Proxy
	ln      net.Listener
	lrc     syscall.RawConn // the listener's: to see it is still open
	f       *os.File        // the duplicate Serve waits on
	rc      syscall.RawConn // f's
	stop    func() bool     // ends the Shutdown watch
	laddr   *net.TCPAddr    // the clients' local address; nil: the listener's is unspecified (read it per client)
	preset  bool            // the clients' keepalive is set already (inherited from a listener made by Listen)
	nodelay bool            // the clients inherit TCP_NODELAY from the listening socket
	fds     []int32
	addrs   []unix.RawSockaddrAny
}

// liveCheck is how often Serve, waiting on a rawListener, looks whether
// its listener was closed.
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
	dfd, err := dupFD(tl)
	if err != nil {
		return nil
	}
	f, rc, err := pollFile(dfd, "pinproxy-listener")
	if err != nil {
		return nil
	}
	r := &rawListener{p: p, ln: ln, lrc: lrc, f: f, rc: rc, preset: preset, addrs: make([]unix.RawSockaddrAny, rawBatch)}
	// TCP_NODELAY, which net sets on every TCP conn, is set once on the
	// listening socket: Linux copies it to each socket accepted from it,
	// so no client costs a setsockopt for it.
	lrc.Control(func(fd uintptr) { r.nodelay = setNoDelay(int32(fd)) == 0 })
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsUnspecified() {
		r.laddr = a
	}
	p.upg.mu.Lock()
	if p.upg.raws == nil {
		p.upg.raws = make(map[net.Listener]*rawListener)
	}
	p.upg.raws[ln] = r
	held := p.upg.held != nil
	p.upg.mu.Unlock()
	if held {
		f.SetReadDeadline(aLongTimeAgo)
	} else {
		f.SetReadDeadline(time.Now().Add(liveCheck))
	}
	r.stop = context.AfterFunc(p.stopCtx, func() { f.SetReadDeadline(aLongTimeAgo) })
	return r
}

// close ends r's use of its listener; Serve calls it as it returns.
func (r *rawListener) close() {
	if r == nil {
		return
	}
	r.stop()
	r.p.upg.mu.Lock()
	delete(r.p.upg.raws, r.ln)
	r.p.upg.mu.Unlock()
	r.f.Close()
}

// hold sets the deadline of the listener rl's duplicate, if Serve waits
// on one: t, for holdAccepts.
func (p *Proxy) holdRaw(ln net.Listener, t time.Time) {
	p.upg.mu.Lock()
	r := p.upg.raws[ln]
	p.upg.mu.Unlock()
	if r != nil {
		r.f.SetReadDeadline(t)
	}
}

// accept waits for clients, takes those queued (at most rawBatch), and
// admits each: it then counts in starting, or is closed. An error is the
// listener's (closed, held, out of descriptors), as Accept's.
func (r *rawListener) accept() error {
	for {
		err := r.take()
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		// The deadline: a hold, Shutdown, or the look at the listener.
		r.p.upg.mu.Lock()
		held := r.p.upg.held != nil
		r.p.upg.mu.Unlock()
		if held || r.p.stopCtx.Err() != nil {
			return err
		}
		if cerr := r.lrc.Control(func(uintptr) {}); cerr != nil {
			return &net.OpError{Op: "accept", Net: "tcp", Addr: r.ln.Addr(), Err: cerr}
		}
		r.f.SetReadDeadline(time.Now().Add(liveCheck))
	}
}

// take is one wait and batch of accept.
func (r *rawListener) take() error {
	var aerr error
	r.fds = r.fds[:0]
	err := r.rc.Read(func(fd uintptr) bool {
		for len(r.fds) < rawBatch {
			sa := &r.addrs[len(r.fds)]
			n := uint32(unix.SizeofSockaddrAny)
			s, _, e := syscall.Syscall6(unix.SYS_ACCEPT4, fd, uintptr(unsafe.Pointer(sa)), uintptr(unsafe.Pointer(&n)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
			switch e {
			case 0:
				r.fds = append(r.fds, int32(s))
				continue
			case unix.EINTR, unix.ECONNABORTED: // a client that left while queued
				continue
			case unix.EAGAIN:
			default:
				aerr = os.NewSyscallError("accept4", e)
			}
			break
		}
		return len(r.fds) > 0 || aerr != nil
	})
	for i, fd := range r.fds {
		r.p.acceptFD(fd, r.clientConn(fd, &r.addrs[i]), r.preset, r.nodelay)
	}
	if err == nil && len(r.fds) == 0 {
		err = aerr
	}
	if err != nil {
		return &net.OpError{Op: "accept", Net: "tcp", Addr: r.ln.Addr(), Err: err}
	}
	return nil
}

// clientConn is the addresses of the client accepted as fd, from sa.
func (r *rawListener) clientConn(fd int32, sa *unix.RawSockaddrAny) *heldConn {
	c := &heldConn{raddr: tcpAddrOf(sa)}
	if r.laddr != nil {
		c.laddr = r.laddr
	} else if lsa, err := unix.Getsockname(int(fd)); err == nil {
		c.laddr = sockaddrTCP(lsa)
	}
	return c
}

// acceptFD admits the client accepted as the bare socket fd and starts
// its dial on a loop; a client not admitted is closed. nodelay: fd has
// TCP_NODELAY already, from its listener.
func (p *Proxy) acceptFD(fd int32, client *heldConn, preset, nodelay bool) {
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
	p.loops.dial(p, fd, client)
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

// tcpAddrOf is the TCP address in sa, as net makes it from an accept.
func tcpAddrOf(sa *unix.RawSockaddrAny) *net.TCPAddr {
	switch sa.Addr.Family {
	case unix.AF_INET:
		s := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4(s.Addr), netPort(&s.Port)))
	case unix.AF_INET6:
		s := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
		a := net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom16(s.Addr), netPort(&s.Port)))
		a.Zone = zoneName(s.Scope_id)
		return a
	}
	return nil
}

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
