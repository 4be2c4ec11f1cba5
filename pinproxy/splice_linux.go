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
// deadline, see upgrade_linux.go), the bytes already in the pipe are read
// back into dir.pending, not thrown away with the pipe, so they move with
// the connection. Each step moves at most splicePipeSize bytes, which
// bounds what a direction can hold pending. Reads honour src's read
// deadline before taking a byte, as the runtime's do.
//
//go:noinline
func spliceQueued(dst, src *net.TCPConn, n int, dir *direction) error {
	drc, err := dst.SyscallConn()
	if err != nil {
		return err
	}
	src2, err := src.SyscallConn()
	if err != nil {
		return err
	}
	p := splicePipes.Get().(*splicePipe)
	defer p.put()
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
			return err
		}
		if rerr != 0 {
			return &net.OpError{Op: "splice", Net: "tcp", Err: rerr}
		}
		if in == 0 {
			return nil // EOF: the next look sees it
		}
		p.n = in
		n -= in
		var werr syscall.Errno
		err := drc.Write(func(fd uintptr) bool {
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
		if err != nil {
			p.drain(dir)
			return err
		}
	}
	return nil
}

// splicePipeSize is the most one splice step moves: the pipe's size.
const splicePipeSize = wireMaxPending

// splicePipe is a pipe and how many bytes are in it.
type splicePipe struct {
	r, w int
	n    int
}

// splicePipes caches pipes, as the runtime does for io.Copy's splices: a
// pipe is two descriptors, taken for one burst and given back. A pipe the
// pool drops is closed by its cleanup.
var splicePipes = sync.Pool{New: func() any {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return &splicePipe{r: -1, w: -1}
	}
	unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, splicePipeSize)
	p := &splicePipe{r: fds[0], w: fds[1]}
	runtime.AddCleanup(p, func(fds [2]int) { unix.Close(fds[0]); unix.Close(fds[1]) }, fds)
	return p
}}

// drain reads what is left in the pipe into dir.pending.
func (p *splicePipe) drain(dir *direction) {
	for p.n > 0 {
		b := make([]byte, p.n)
		m, err := unix.Read(p.r, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			return // cannot happen with bytes in the pipe; put drops it
		}
		dir.pending = append(dir.pending, b[:m]...)
		p.n -= m
	}
}

// put gives the pipe back, or drops it when it is not empty (or broken).
func (p *splicePipe) put() {
	if p.n != 0 || p.r < 0 {
		return // the cleanup closes it
	}
	splicePipes.Put(p)
}
