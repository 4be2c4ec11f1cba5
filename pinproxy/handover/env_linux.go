package handover

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// startStd is env.start on Linux: SIGUSR2 blocked in the child.
var startStd = startChildUSR2Blocked

// exeOf reads /proc/PID/exe.
func exeOf(pid int) (string, error) { return os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe") }

// peerCred reads SO_PEERCRED.
func peerCred(uc *net.UnixConn) (Cred, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, err
	}
	var uc2 *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		uc2, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Cred{}, err
	}
	if cerr != nil {
		return Cred{}, fmt.Errorf("handover: SO_PEERCRED: %w", cerr)
	}
	return Cred{PID: int(uc2.Pid), UID: int(uc2.Uid), GID: int(uc2.Gid)}, nil
}

// startChildUSR2Blocked is startChild with SIGUSR2 blocked in the child
// from its fork on. Between fork and exec the child runs the old
// process's code with Go's handlers reset to the default, and after exec
// it runs the new file with every handler at the default until its
// runtime installs its own: a SIGUSR2 in either window (an operator's
// `kill -USR2 $(pidof server)` during a hand-over) would kill it. The
// signal mask, unlike the handlers, survives exec, so a blocked SIGUSR2
// waits, pending, until the new process asks for it: os/signal.Notify
// unblocks it. The runtime saves the forking thread's mask before the
// fork and gives it to the child, so the fork runs on a thread of its
// own with SIGUSR2 blocked, which exits with it.
func startChildUSR2Blocked(path string, args, environ []string, files []*os.File) (process, error) {
	type started struct {
		p   process
		err error
	}
	done := make(chan started, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var set unix.Sigset_t
		const bits = int(unsafe.Sizeof(set.Val[0])) * 8
		sig := int(unix.SIGUSR2) - 1
		set.Val[sig/bits] |= 1 << (sig % bits)
		if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil); err != nil {
			done <- started{err: fmt.Errorf("handover: blocking SIGUSR2 for the child: %w", err)}
			return
		}
		p, err := startChild(path, args, environ, files)
		done <- started{p, err}
	}()
	s := <-done
	return s.p, s.err
}

// peerProcess is a process that connected to a Socket: not a child, so it
// is watched and killed through a pidfd, which names that process and
// never a later one given its pid.
type peerProcess struct {
	pid    int
	exited chan struct{}
	mu     sync.Mutex
	fd     int // the pidfd; -1 once the process has exited and it is closed
}

// watchPeer is env.watch on Linux.
func watchPeer(pid int) (process, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("handover: pidfd_open %d: %w", pid, err)
	}
	p := &peerProcess{pid: pid, fd: fd, exited: make(chan struct{})}
	go func() {
		// The pidfd becomes readable once the process has exited.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
		p.mu.Lock()
		unix.Close(p.fd)
		p.fd = -1
		p.mu.Unlock()
		close(p.exited)
	}()
	return p, nil
}

func (p *peerProcess) Pid() int { return p.pid }

func (p *peerProcess) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return nil // exited
	}
	return unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
}

func (p *peerProcess) Exited() <-chan struct{} { return p.exited }

// errNotChild is a peerProcess's Err: how it exited is its parent's to
// know.
var errNotChild = errors.New("not this process's child: status unknown")

func (p *peerProcess) Err() error { return errNotChild }
