//go:build unix

package handover

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Descriptor passing: one message and its descriptors (SCM_RIGHTS) per
// sendmsg and recvmsg on a SOCK_SEQPACKET socket.

// sendMsg sends one message with fds.
func sendMsg(uc *net.UnixConn, b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := uc.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return fmt.Errorf("handover: sending %c: %w", b[0], err)
	}
	if n != len(b) || oobn != len(oob) {
		return fmt.Errorf("handover: sending %c: short write", b[0])
	}
	return nil
}

// errClosed is the other side closing its end before a message.
var errClosed = errors.New("handover: the other process closed the socket")

// recvRaw receives one message and the descriptors it carried (the
// caller closes them, even on error).
func recvRaw(uc *net.UnixConn) ([]byte, []int, error) {
	buf := make([]byte, maxMessage+1)
	oob := make([]byte, unix.CmsgSpace(253*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	var fds []int
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for i := range msgs {
				if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET): // closed, with our messages unread
		return nil, fds, errClosed
	case err != nil:
		return nil, fds, err
	case n == 0:
		return nil, fds, errClosed
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > maxMessage:
		return nil, fds, fmt.Errorf("%w: truncated", errWire)
	}
	return buf[:n], fds, nil
}

// recvMsg receives one message of kind into v and returns the
// descriptors it carried (the caller closes them, even on error).
func recvMsg(uc *net.UnixConn, kind byte, v any) ([]int, error) {
	b, fds, err := recvRaw(uc)
	if err != nil {
		return fds, err
	}
	return fds, parseMsg(b, len(fds), kind, v)
}

// closeFDs closes every descriptor in fds that is not -1.
func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
}

// setBuffer makes room in uc's send buffer for the largest message (the
// kernel caps it at twice wmem_max).
func setBuffer(uc *net.UnixConn) { uc.SetWriteBuffer(2 * maxMessage) }

// socketPair returns the two ends of a SOCK_SEQPACKET socket pair: this
// process's as a conn, the other as a file to pass on.
func socketPair() (*net.UnixConn, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1]) // os.StartProcess dups it into place without
	f := os.NewFile(uintptr(fds[0]), "handover")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "handover"), nil
}
