package pinproxy

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pump copies src to dst until src's EOF (nil) or an error, as io.Copy
// does, and between two *net.TCPConn it moves the bytes with splice(2), as
// io.Copy does. The difference is what an idle direction holds. io.Copy
// takes a splice pipe (two fds) from the runtime's pool and keeps it while
// it waits for src to become readable (internal/poll.spliceDrain waits
// inside Splice), so each idle direction holds one: 6 fds per idle
// connection instead of 2, and only about 3,300 idle connections under an
// open-file limit of 20,000. pump waits for readability without a pipe,
// parked in the netpoller, then splices exactly the bytes already queued on
// src, which never waits for a read, and the pipe goes back to the pool
// when that burst has moved. A splice that cannot write (dst full) still
// waits with its pipe, as io.Copy would: those bytes are in flight.
//
// The waiting path is kept shallow (small frames, raw syscalls): an idle
// connection's goroutines spend their life parked on it, and a goroutine
// whose deepest call fits in the runtime's smallest stack keeps 2 KiB
// instead of 4.
func pump(dst, src net.Conn) (int64, error) {
	d, ok := dst.(*net.TCPConn)
	s, ok2 := src.(*net.TCPConn)
	if !ok || !ok2 {
		return io.Copy(dst, src)
	}
	rc, err := s.SyscallConn()
	if err != nil {
		return io.Copy(dst, src)
	}
	l := &looker{lr: io.LimitedReader{R: s}}
	var written int64
	for {
		if err := rc.Read(l.look); err != nil {
			return written, err // closed by another goroutine, or a deadline
		}
		if l.errno != 0 {
			return written, readError(s, l.errno)
		}
		if l.queued == 0 {
			return written, nil // EOF
		}
		// lr.N bytes are queued: Splice moves them and returns without
		// waiting for more.
		l.lr.N = int64(l.queued)
		n, err := d.ReadFrom(&l.lr)
		written += n
		if err != nil {
			return written, err
		}
	}
}

// looker holds one direction's state between looks, off the stack.
type looker struct {
	queued int
	errno  syscall.Errno
	lr     io.LimitedReader
}

// look is the syscall.RawConn.Read callback: it returns false, so the
// goroutine parks until the socket is readable, while nothing is queued.
func (l *looker) look(fd uintptr) bool {
	l.queued, l.errno = queuedBytes(fd)
	return l.errno != syscall.EAGAIN
}

// queuedBytes returns how many bytes can be read from the socket fd now
// without blocking: > 0 when data is queued, 0 at EOF, EAGAIN when there is
// nothing yet, or the socket's pending error (ECONNRESET, …). The peek comes
// first because it is the one call that tells all of these apart; the size
// is asked only when there is data.
func queuedBytes(fd uintptr) (int, syscall.Errno) {
	var b byte
	for {
		m, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b)), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e != 0:
			return 0, e
		case m == 0:
			return 0, 0 // EOF
		}
		var n int32
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, unix.SIOCINQ, uintptr(unsafe.Pointer(&n))); e == 0 && n > 0 {
			return int(n), 0
		}
		return 1, 0 // the peek saw a byte
	}
}

// readError reports a failed look at src as the read error it stands for.
// It is kept out of line so its locals do not widen pump's frame.
//
//go:noinline
func readError(src *net.TCPConn, errno syscall.Errno) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: src.LocalAddr(), Addr: src.RemoteAddr(), Err: os.NewSyscallError("recvfrom", errno)}
}
