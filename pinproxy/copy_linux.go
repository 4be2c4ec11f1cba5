package pinproxy

import (
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pump copies src to dst until src's EOF (nil) or an error, as io.Copy
// does, adding the bytes to dir as each burst moves (a burst is at most
// what was queued on src, so a long splice is counted as it goes), and between two *net.TCPConn it moves bulk bytes with splice(2), as
// io.Copy does. The differences are what an idle direction holds and what
// a short message costs. io.Copy takes a splice pipe (two fds) from the
// runtime's pool and keeps it while it waits for src to become readable
// (internal/poll.spliceDrain waits inside Splice), so each idle direction
// holds one: 6 fds per idle connection instead of 2, and only about 3,300
// idle connections under an open-file limit of 20,000. pump waits for
// readability without a pipe or buffer, parked in the netpoller, then reads
// what is queued into a pooled smallBurst buffer and writes it out; when
// the buffer fills, it splices exactly the bytes queued behind it, which
// never waits for a read, and the pipe goes back to the pool when that
// burst has moved. A write or splice that cannot proceed (dst full) still
// waits with its buffer or pipe, as io.Copy would: those bytes are in
// flight.
//
// The waiting path is kept shallow (small frames, raw syscalls): an idle
// connection's goroutines spend their life parked on it, and a goroutine
// whose deepest call fits in the runtime's smallest stack keeps 2 KiB
// instead of 4.
func pump(dst, src net.Conn, bufs *sync.Pool, dir *direction) error {
	d, ok := dst.(*net.TCPConn)
	s, ok2 := src.(*net.TCPConn)
	if !ok || !ok2 {
		return copyCounting(dst, src, dir)
	}
	rc, err := s.SyscallConn()
	if err != nil {
		return copyCounting(dst, src, dir)
	}
	l := &looker{bufs: bufs, dir: dir}
	for {
		if err := rc.Read(l.look); err != nil {
			return err // closed by another goroutine, or a deadline (the parker's)
		}
		if l.errno != 0 {
			return readError(s, l.errno)
		}
		if l.n == 0 {
			return nil // EOF
		}
		n, err := d.Write(l.buf[:l.n])
		if err != nil && n < l.n {
			dir.pending = append([]byte(nil), l.buf[n:l.n]...) // an upgrade stopped the write
		}
		bufs.Put(l.buf)
		l.buf = nil
		dir.add(int64(n))
		if err != nil {
			return err
		}
		if l.queued == 0 {
			continue
		}
		// The burst did not fit in the buffer: the l.queued bytes
		// behind it are spliced, which never waits for more.
		if err := spliceQueued(d, s, l.queued, dir); err != nil {
			return err
		}
	}
}

// smallBurst is the size of the pooled buffer a look reads into. A burst
// that fits (a peer protocol's messages, a request) moves with one read and
// one write, no pipe; a larger one moves its first smallBurst bytes that
// way and the rest with splice, whose fixed cost (two splices, a pipe from
// the runtime's pool) then pays for itself.
const smallBurst = 16 << 10

// newBurstBuf is the New function of the pool pump takes its buffers from.
func newBurstBuf() any { return new([smallBurst]byte) }

// looker holds one direction's state between looks, off the stack.
type looker struct {
	bufs   *sync.Pool
	dir    *direction
	buf    *[smallBurst]byte // the burst just read, n bytes; nil while waiting
	n      int
	queued int // bytes still queued behind a full buf
	errno  syscall.Errno
}

// look is the syscall.RawConn.Read callback. It reads what is queued on
// the socket into a pooled buffer, which it gives back at once when
// nothing is, so an idle direction holds no buffer; it returns false, so
// the goroutine parks until the socket is readable, while nothing is
// queued. On return l.n > 0 with l.buf holding the bytes (and l.queued the
// bytes behind them when buf is full), or l.n == 0 at EOF, or l.errno set.
func (l *looker) look(fd uintptr) bool {
	b := l.bufs.Get().(*[smallBurst]byte)
	n, errno := recvNow(fd, b[:])
	if errno == syscall.EAGAIN {
		l.bufs.Put(b)
		l.dir.waiting.Store(true)
		if l.dir.eager {
			l.dir.link.waited()
		}
		return false
	}
	if l.dir.waiting.Load() {
		l.dir.waiting.Store(false)
	}
	l.n, l.errno, l.queued = n, errno, 0 // recvNow's n is 0 with an errno
	if n == 0 {
		l.bufs.Put(b)
		return true
	}
	l.buf = b
	if n == len(b) {
		l.queued = queuedBytes(fd)
	}
	return true
}

// recvNow reads what is queued on the socket fd into b without waiting:
// n > 0 bytes, 0 at EOF, EAGAIN when nothing is queued yet, or the socket's
// pending error (ECONNRESET, …). It never blocks, so it is a raw system
// call: the scheduler is not told, as for the event loops' other calls
// (loop_linux.go, rawCall).
func recvNow(fd uintptr, b []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
			syscall.MSG_DONTWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), 0
	}
}

// queuedBytes returns how many bytes are queued on the socket fd (SIOCINQ),
// 0 if it cannot tell: a splice of 0 bytes would be wasted, and the next
// look reads whatever is there.
func queuedBytes(fd uintptr) int {
	var n int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, unix.SIOCINQ, uintptr(unsafe.Pointer(&n))); e != 0 || n < 0 {
		return 0
	}
	return int(n)
}

// readError reports a failed look at src as the read error it stands for.
// It is kept out of line so its locals do not widen pump's frame.
//
//go:noinline
func readError(src *net.TCPConn, errno syscall.Errno) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: src.LocalAddr(), Addr: src.RemoteAddr(), Err: os.NewSyscallError("recvfrom", errno)}
}
