package pinproxy

import (
	"net"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// spliceQueued moves the n bytes queued on src to dst through a pipe, in
// the kernel, as the runtime's splice does (internal/poll.Splice), with
// one difference: when the write to dst fails (an upgrade's write
// deadline, see upgrade_linux.go), the pipe, with the bytes still in it,
// stays with the direction (dir.pipe) instead of being destroyed, so it
// moves with the connection, or is written out first if the connection
// stays. Reads honour src's read deadline before taking a byte, as the
// runtime's do.
//
//go:noinline
func spliceQueued(dst, src *net.TCPConn, n int, dir *direction) error {
	src2, err := src.SyscallConn()
	if err != nil {
		return err
	}
	p := splicePipes.Get().(*splicePipe)
	for n > 0 {
		var in int
		var rerr syscall.Errno
		if err := src2.Read(func(fd uintptr) bool {
			for {
				m, err := unix.Splice(int(fd), nil, p.w, nil, min(n, splicePipeSize), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				switch err {
				case unix.EINTR:
					continue
				case unix.EAGAIN:
					return false
				case nil:
					in = int(m)
				default:
					rerr = err.(syscall.Errno)
				}
				return true
			}
		}); err != nil {
			p.put()
			return err
		}
		if rerr != 0 {
			p.put()
			return &net.OpError{Op: "splice", Net: "tcp", Err: rerr}
		}
		if in == 0 {
			p.put()
			return nil // EOF: the next look sees it
		}
		p.n = in
		n -= in
		if err := p.writeTo(dst, dir); err != nil {
			dir.pipe = p // the bytes left in it go with the direction
			return err
		}
	}
	p.put()
	return nil
}

// writeTo splices what is in the pipe to dst, counting it into dir.
func (p *splicePipe) writeTo(dst *net.TCPConn, dir *direction) error {
	drc, err := dst.SyscallConn()
	if err != nil {
		return err
	}
	var werr syscall.Errno
	err = drc.Write(func(fd uintptr) bool {
		for p.n > 0 {
			m, err := unix.Splice(p.r, nil, int(fd), nil, p.n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch err {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false
			case nil:
				p.n -= int(m)
				dir.add(m)
				continue
			}
			werr = err.(syscall.Errno)
			return true
		}
		return true
	})
	if err == nil && werr != 0 {
		err = &net.OpError{Op: "splice", Net: "tcp", Err: werr}
	}
	return err
}

// writePipe writes out the bytes a cut-short splice left in d.pipe.
func writePipe(dst net.Conn, d *direction) error {
	tc, ok := dst.(*net.TCPConn)
	if !ok {
		return nil
	}
	if err := d.pipe.writeTo(tc, d); err != nil {
		return err
	}
	d.pipe.put()
	d.pipe = nil
	return nil
}

// splicePipeSize is the most one splice step moves, as the runtime's.
const splicePipeSize = 1 << 20

// splicePipe is a pipe and how many bytes are in it. A pipe handed over
// from another process has no write end (w < 0).
type splicePipe struct {
	r, w int
	n    int
}

// splicePipes caches pipes, as the runtime does for io.Copy's splices: a
// pipe is two descriptors, taken for one burst and given back. A pipe
// dropped (by the pool, or not empty) is closed by its cleanup.
var splicePipes = sync.Pool{New: func() any {
	r, w, err := newPipe()
	if err != nil {
		return &splicePipe{r: -1, w: -1}
	}
	return newSplicePipe(r, w, 0)
}}

// newPipe makes a nonblocking, close-on-exec pipe that holds one splice
// step (splicePipeSize): the goroutines' pool and the event loops' take
// their pipes from it.
func newPipe() (r, w int, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return -1, -1, err
	}
	unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, splicePipeSize)
	return fds[0], fds[1], nil
}

// newSplicePipe wraps the pipe r, w (w may be -1) holding n bytes.
func newSplicePipe(r, w, n int) *splicePipe {
	p := &splicePipe{r: r, w: w, n: n}
	runtime.AddCleanup(p, func(fds [2]int) {
		unix.Close(fds[0])
		if fds[1] >= 0 {
			unix.Close(fds[1])
		}
	}, [2]int{r, w})
	return p
}

// put gives the pipe back, or drops it when it is not empty, broken or
// has no write end.
func (p *splicePipe) put() {
	if p.n != 0 || p.r < 0 || p.w < 0 {
		return // the cleanup closes it
	}
	splicePipes.Put(p)
}
