package pinproxytest

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// held is a TCP socket bound to a loopback port and not listening: the
// kernel refuses dials to the port (a reset), and while it is open no other
// socket can bind the port, neither by number nor as one the kernel picks
// (bind to port 0, a dial's source port). A port listened on and closed
// instead is free for any process to take, and a listener that takes it
// answers the dials meant to be refused. It is not SO_REUSEADDR, so that
// even a socket that is cannot share the port.
type held struct {
	fd   int
	addr string
}

// hold binds a socket to a free loopback port.
func hold() (*held, error) {
	syscall.ForkLock.RLock() // as net does: no child may inherit fd before it is close-on-exec
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("getsockname", err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		syscall.Close(fd)
		return nil, fmt.Errorf("getsockname: %T, want an IPv4 address", sa)
	}
	return &held{fd: fd, addr: fmt.Sprintf("127.0.0.1:%d", in.Port)}, nil
}

// listen makes h's socket a listener, so that the port is never free in
// between; h is spent either way. SO_REUSEADDR goes on first, as net.Listen
// sets it, so that once this listener is closed the node can listen on the
// port again while its closed connections are in TIME_WAIT.
func (h *held) listen() (net.Listener, error) {
	f := os.NewFile(uintptr(h.fd), "tcp:"+h.addr)
	defer f.Close() // net.FileListener has a copy of the descriptor
	if err := syscall.SetsockoptInt(h.fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return nil, os.NewSyscallError("setsockopt", err)
	}
	if err := syscall.Listen(h.fd, syscall.SOMAXCONN); err != nil {
		return nil, os.NewSyscallError("listen", err)
	}
	return net.FileListener(f)
}

// release frees the port.
func (h *held) release() { syscall.Close(h.fd) }
