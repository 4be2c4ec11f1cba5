//go:build !linux

package handover

import (
	"errors"
	"fmt"
	"net"
	"os"
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
	peerCred: func(*net.UnixConn) (Cred, error) {
		return Cred{}, fmt.Errorf("handover: reading a peer's credentials: %w", errors.ErrUnsupported)
	},
	exe: func(pid int) (string, error) {
		return "", fmt.Errorf("handover: reading process %d's executable: %w", pid, errors.ErrUnsupported)
	},
}
