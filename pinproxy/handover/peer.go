package handover

import (
	"net"
	"os"
)

// Peer is the other process of a hand-over: the socket to it and, when
// this process started it (Exec), the process itself.
type Peer struct {
	conn *net.UnixConn
	proc process // nil unless this process started it, or it connected to a Socket
	env  *env
}

// NewPeer returns the peer at the other end of c, a Unix socket of type
// SOCK_SEQPACKET ("unixpacket"). child, if not nil, is that process, a
// child of this one: a hand-over to it that fails kills it, so it
// serves nothing.
func NewPeer(c *net.UnixConn, child *os.Process) *Peer {
	pe := &Peer{conn: c, env: stdEnv}
	if child != nil {
		pe.proc = newChild(child)
	}
	return pe
}

// PID returns the process id of a peer this process started or that
// connected to its Socket, or 0.
func (pe *Peer) PID() int {
	if pe.proc == nil {
		return 0
	}
	return pe.proc.Pid()
}

// Close closes the socket to the peer.
func (pe *Peer) Close() error { return pe.conn.Close() }

// exited returns a channel closed once a peer whose process is known has
// exited (nil for another peer: never).
func (pe *Peer) exited() <-chan struct{} {
	if pe.proc == nil {
		return nil
	}
	return pe.proc.Exited()
}
