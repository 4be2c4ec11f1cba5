package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFile is the name of the state directory's lock file. It holds the
// pid of the agent that locked it last; the lock itself is the kernel's
// (flock), released when that agent closes it or exits, so a file left
// by a crash locks nothing. The file is never removed: removing it while
// another agent waits to lock it would let two agents lock two files.
const lockFile = "agent.lock"

// lockStateDir takes an exclusive lock on dir's lock file without waiting
// (flock(2), LOCK_EX|LOCK_NB) and records this process's pid in it. The
// lock lasts while the returned file is open; closing it, or the
// process's exit, releases it. When another agent holds it, the error
// wraps ErrLocked.
func lockStateDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	// No O_TRUNC: the file holds the pid of an agent that may hold it.
	// No link followed: the pid is written over what the file holds, and
	// through a symbolic link that would be another file (run as root,
	// /etc/hostname was).
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("lock %s is a symbolic link; want a file of the agent's own (remove the link)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a regular file (%v); want a file of the agent's own (remove it)", path, fi.Mode().Type())
		}
		return nil, fmt.Errorf("lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case errors.Is(err, unix.EWOULDBLOCK):
		if pid := readPID(f); pid > 0 {
			err = fmt.Errorf("%w (pid %d)", ErrLocked, pid)
		} else {
			err = ErrLocked
		}
	case err != nil:
		err = fmt.Errorf("lock %s: %w", path, err)
	default:
		if err = writePID(f); err != nil {
			err = fmt.Errorf("lock %s: %w", path, err)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// readPID reads the pid a lock file holds; 0 when there is none (the
// holder may not have written it yet).
func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid < 1 {
		return 0
	}
	return pid
}

// writePID records this process's pid in the lock file f, which it holds.
func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// lockStill says whether the lock file in dir is still f, the one this
// agent locked: gone when dir or the file was removed; taken when
// another file is there now (another agent's, locked since), with that
// agent's pid if it wrote one (else 0).
func lockStill(f *os.File, dir string) (gone, taken bool, pid int, err error) {
	var held, now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &held); err != nil {
		return false, false, 0, err
	}
	path := filepath.Join(dir, lockFile)
	err = unix.Lstat(path, &now)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return true, false, 0, nil
	}
	if err != nil {
		return false, false, 0, err
	}
	if held.Dev == now.Dev && held.Ino == now.Ino {
		return false, false, 0, nil
	}
	if g, err := os.Open(path); err == nil {
		pid = readPID(g)
		g.Close()
	}
	return false, true, pid, nil
}
