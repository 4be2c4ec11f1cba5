package handover

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

var stdEnv = &env{
	getpid:     os.Getpid,
	geteuid:    os.Geteuid,
	executable: os.Executable,
	args:       func() []string { return os.Args[1:] },
	environ:    os.Environ,
	getenv:     os.Getenv,
	newFile:    os.NewFile,
	start:      startChild,
	peerCred:   peerCred,
	exe:        func(pid int) (string, error) { return os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe") },
}

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
