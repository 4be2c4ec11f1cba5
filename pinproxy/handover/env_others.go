//go:build !linux

package handover

import (
	"errors"
	"fmt"
	"net"
)

// startStd is env.start off Linux.
var startStd = startChild

func peerCred(*net.UnixConn) (Cred, error) {
	return Cred{}, fmt.Errorf("handover: reading a peer's credentials: %w", errors.ErrUnsupported)
}

func exeOf(pid int) (string, error) {
	return "", fmt.Errorf("handover: reading process %d's executable: %w", pid, errors.ErrUnsupported)
}

func watchPeer(pid int) (process, error) {
	return nil, fmt.Errorf("handover: watching process %d: %w", pid, errors.ErrUnsupported)
}
