package pinproxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// This file is the data path: the bytes of one client connection and its
// upstream. It is kept apart so it can be reworked and benchmarked
// (internal/proxybench) without touching the routing logic. The contract
// with proxy.go:
//
//   - splice is called once per connection, from the connection's own
//     goroutine, after both conns are open; it returns when both
//     directions have ended, and both conns are closed by then.
//   - Other goroutines may Close either conn at any time (a rebalance round
//     moving the connection, a forced Shutdown); splice must then return
//     promptly.
//   - up counts bytes from client to upstream, down the other way.

// splice copies bytes both ways between client and upstream. When one
// side ends its stream cleanly (EOF), the other side's write half is
// closed, so a half-close is carried through and the reply still flows
// back; an error in either direction closes both conns, which ends the
// other direction too. Each direction is a pump (copy_linux.go): between
// two *net.TCPConn the runtime splices bulk bytes in the kernel, as io.Copy
// does, but an idle direction holds no splice pipe (and short bursts move
// through bufs, a pool of small buffers); so the conns must not be
// wrapped in anything that hides *net.TCPConn.
func splice(client, upstream net.Conn, bufs *sync.Pool) (up, down int64, err error) {
	type result struct {
		n   int64
		err error
	}
	downc := make(chan result, 1)
	var clean atomic.Int32 // directions that ended with EOF
	go func() {
		n, err := pump(client, upstream, bufs)
		endDirection(client, upstream, err, &clean)
		downc <- result{n, err}
	}()
	up, errUp := pump(upstream, client, bufs)
	endDirection(upstream, client, errUp, &clean)
	r := <-downc
	client.Close()
	upstream.Close()
	return up, r.n, errors.Join(errUp, r.err)
}

// endDirection passes the end of src's stream on to dst: a clean end
// becomes a half-close of dst's write side; an error, or a dst that cannot
// half-close, closes both. When the other direction has ended cleanly too,
// dst's FIN is left to the Close that follows at once in splice (one
// shutdown(2) fewer per connection, the same packets: dst has nothing
// unread, its own stream having ended, so the close sends a FIN, not a
// reset).
func endDirection(dst, src net.Conn, err error, clean *atomic.Int32) {
	if err == nil {
		if clean.Add(1) == 2 {
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	dst.Close()
	src.Close()
}
