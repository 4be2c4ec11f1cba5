package pinproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the data path: the bytes of one client connection and its
// upstream. It is kept apart so it can be reworked and benchmarked
// (internal/tools/proxybench) without touching the routing logic. On Linux
// a connection between two *net.TCPConn is relayed by the proxy's event
// loops (loop_linux.go: loops.attach instead of start, link.kill instead
// of closePair, the same done), and so is one whose client was accepted
// and upstream dialed on the loops (connect_linux.go makes its link); what follows is the goroutine path, for
// other systems and other conns, and the contract with proxy.go, which the
// loops keep too:
//
//   - newLink makes a connection's link and its start is called once, from
//     the connection's own goroutine, after both conns are open. It calls
//     done exactly once, when both directions have ended and both conns
//     are closed: from the caller's goroutine before it returns, or, if
//     the connection parked (park_linux.go) and start returned early,
//     later from the goroutine that woke it. Either way the caller's
//     goroutine returns from start with nothing left to do. A link an
//     upgrade hands to another process (upgrade_linux.go) ends without
//     done: the upgrade does the bookkeeping.
//   - Other goroutines may close the conns at any time (a rebalance round
//     moving the connection, a forced Shutdown, a health check): through
//     closePair, which also wakes a parked connection, so that done is
//     called promptly. A plain Close of either conn works too, but done
//     then waits for the parker's next sweep (at most a second) if the
//     connection was parked.
//   - bytes are added to total as they are copied (splice included), up
//     for client to upstream, down the other way; done's spliceResult has
//     the connection's own totals and which side's stream ended first.
//     done (Proxy.finish) is the one place a connection's end is
//     reported, from either path.

// byteCounters are live byte counts, added to as bytes are copied: up
// from client to upstream, down from upstream to client. One upstream's
// connections share one.
type byteCounters struct {
	up, down atomic.Int64
}

// side names one end of a proxied connection.
type side int32

const (
	sideNone     side = iota
	sideClient        // the client's stream ended (EOF or an error reading it)
	sideUpstream      // the upstream's stream ended
)

func (s side) String() string {
	switch s {
	case sideClient:
		return "client"
	case sideUpstream:
		return "upstream"
	}
	return "none"
}

// spliceResult is what splice reports to done when a connection has ended.
type spliceResult struct {
	up, down int64 // bytes copied client→upstream and upstream→client
	// first is the side whose stream ended first: its peer closed or
	// half-closed it, or reading it failed (with net.ErrClosed in err when
	// the proxy closed the conns itself).
	first side
	// firstAt is when that stream ended: an upstream that closes at once
	// has refused the session even if the client holds its end long after.
	firstAt time.Time
	err     error // both directions' errors joined; nil when both ended cleanly (EOF)
}

// link is one connection's data path: its two conns and what the copy
// path keeps between parks.
type link struct {
	client, upstream net.Conn
	bufs             *sync.Pool
	pk               *parker // nil: the link never parks
	done             func(spliceResult)
	dirs             [2]direction // 0: client→upstream, 1: upstream→client
	clean            atomic.Int32 // directions that ended with EOF
	first            atomic.Int32 // side whose stream ended first
	firstAt          atomic.Int64 // when it ended: nanoseconds since linkEpoch

	// Parking (park_linux.go). state is read without mu but changed
	// under it, except by the link's run goroutine where it says so.
	state atomic.Int32
	mu    sync.Mutex
	// The parker's part, made by parker.add: a link an event loop holds
	// never parks, and goes without.
	*parkedLink
	// kaPending: the upstream's keepalive is still to be set, by the
	// parker's next sweep or the link's event loop, which clear it (an
	// upgrade's new process sets its own on what it adopts).
	kaPending atomic.Bool
	mv        *mover // the upgrade holding the link while linkMoving; under mu

	loopState // while an event loop holds it (loop_linux.go)
}

// direction is one direction's state, shared between its pump and the
// parker's sweeps.
type direction struct {
	n     atomic.Int64  // bytes copied so far
	total *atomic.Int64 // the upstream's counter for this direction
	link  *link         // set when eager

	// Written by the direction's goroutine, read by the link's run
	// goroutine after the join; so ended, below.
	err error

	// pending holds bytes read from src but not yet written to dst: an
	// upgrade cut the write short (or handed them over from the process
	// before). pipe, if not nil, holds more: a splice's, cut short the
	// same way (never both). copyDir writes them before it reads again.
	pending []byte
	pipe    *splicePipe

	waiting atomic.Bool // the pump waits for its source to become readable
	// eager: the link parks as soon as both directions wait (a
	// ParkAfter under a millisecond); then each wait calls waited.
	eager bool
	ended bool
}

// add counts n bytes copied.
func (d *direction) add(n int64) {
	if n > 0 {
		d.n.Add(n)
		d.total.Add(n)
	}
}

// newLink returns the data path of one connection, not started; start
// copies bytes both ways between client and upstream, and calls done
// when both directions have ended. When one side ends its stream
// cleanly (EOF), the other side's write half is closed, so a half-close is
// carried through and the reply still flows back; an error in either
// direction closes both conns, which ends the other direction too. Each
// direction is a pump (copy_linux.go): between two *net.TCPConn it
// splices bulk bytes in the kernel, as io.Copy does, but an idle
// direction holds no splice pipe (and short bursts move through bufs, a
// pool of small buffers); so the conns must not be wrapped in anything
// that hides *net.TCPConn. Started with a parker, a connection whose directions
// have both waited for pk's idle time parks: its goroutines end, and the
// first byte or hang-up on either side starts the copy path again in a
// fresh goroutine.
func newLink(client, upstream net.Conn, bufs *sync.Pool, total *byteCounters, done func(spliceResult)) *link {
	l := &link{client: client, upstream: upstream, bufs: bufs, done: done}
	l.dirs[0].total = &total.up
	l.dirs[1].total = &total.down
	return l
}

// start runs l's copy path, in the caller's goroutine, as splice does.
func (l *link) start(pk *parker) {
	pk.add(l)
	l.run()
}

// run copies until the link has ended (then it calls done) or parked.
func (l *link) run() {
	for {
		var downc chan struct{}
		if !l.dirs[1].ended {
			downc = make(chan struct{})
			go func() {
				l.copyDir(1)
				close(downc)
			}()
		}
		if !l.dirs[0].ended {
			l.copyDir(0)
		}
		if downc != nil {
			<-downc
		}
		if l.dirs[0].ended && l.dirs[1].ended {
			l.end()
			return
		}
		// At least one direction paused: the parker or an upgrade
		// asked. Park when both did; otherwise (one ended meanwhile, or
		// the conns were closed) go back to copying. An upgrade holds
		// the link until it knows whether it was handed over.
		if !l.dirs[0].ended && !l.dirs[1].ended && l.pk.park(l) {
			return
		}
		if !l.pk.unpause(l) && l.held() {
			return
		}
	}
}

// copyDir runs direction i's pump until its source ends, or until the
// pump pauses because the parker asked it to.
func (l *link) copyDir(i int) {
	dst, src, s := l.upstream, l.client, sideClient
	if i == 1 {
		dst, src, s = l.client, l.upstream, sideUpstream
	}
	d := &l.dirs[i]
	err := writePending(dst, d)
	if err == nil {
		err = pump(dst, src, l.bufs, d)
	}
	d.waiting.Store(false)
	if st := l.state.Load(); err != nil && (st == linkParking || st == linkMoving) && errors.Is(err, os.ErrDeadlineExceeded) {
		return // paused: the bytes not read yet stay queued on src, those not written in d.pending
	}
	d.ended, d.err = true, err
	l.endedFirst(s)
	endDirection(dst, src, err, &l.clean)
}

// linkEpoch is the origin of link.firstAt, read once so that the times
// it gives carry the monotonic clock.
var linkEpoch = time.Now()

// endedFirst records that s's stream ended, and when, unless the other
// side's ended before.
func (l *link) endedFirst(s side) {
	if l.first.CompareAndSwap(int32(sideNone), int32(s)) {
		l.firstAt.Store(int64(time.Since(linkEpoch)))
	}
}

// firstEnded returns the side whose stream ended first and when, or
// sideNone.
func (l *link) firstEnded() (side, time.Time) {
	s := side(l.first.Load())
	if s == sideNone {
		return s, time.Time{}
	}
	return s, linkEpoch.Add(time.Duration(l.firstAt.Load()))
}

// writePending writes out d's pending bytes, if any.
func writePending(dst net.Conn, d *direction) error {
	if d.pipe != nil {
		return writePipe(dst, d)
	}
	if len(d.pending) == 0 {
		return nil
	}
	n, err := dst.Write(d.pending)
	d.add(int64(n))
	if err != nil {
		d.pending = d.pending[n:]
		return err
	}
	d.pending = nil
	return nil
}

// end closes both conns and reports the link's result.
func (l *link) end() {
	l.ended()
	l.pk.remove(l)
	l.client.Close()
	l.upstream.Close()
	first, at := l.firstEnded()
	l.done(spliceResult{
		up:      l.dirs[0].n.Load(),
		down:    l.dirs[1].n.Load(),
		first:   first,
		firstAt: at,
		err:     joinCauses(l.dirs[0].err, l.dirs[1].err),
	})
}

// joinCauses joins the two directions' errors, leaving out a direction
// that ended only because the other one closed the conns (net.ErrClosed)
// when the other holds the cause.
func joinCauses(a, b error) error {
	aCause, bCause := a != nil && !errors.Is(a, net.ErrClosed), b != nil && !errors.Is(b, net.ErrClosed)
	switch {
	case aCause && !bCause:
		return a
	case bCause && !aCause:
		return b
	}
	return errors.Join(a, b)
}

// endDirection passes the end of src's stream on to dst: a clean end
// becomes a half-close of dst's write side; a dst that cannot half-close
// closes both; an error (a reset, a keepalive or user timeout, on either
// conn) closes both with a reset (SO_LINGER 0), so that the peer on the
// other side learns the stream broke instead of taking a truncated stream
// for a whole one, as it would across a direct connection. A conn closed
// by the proxy itself (net.ErrClosed) is closed as it was. When the other direction has ended cleanly too,
// dst's FIN is left to the Close that follows at once in end (one
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
	if err != nil && !errors.Is(err, net.ErrClosed) {
		abort(dst)
		abort(src)
	}
	dst.Close()
	src.Close()
}

// abort makes c's Close send a reset rather than a FIN: SO_LINGER 0.
func abort(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(int) error }); ok {
		l.SetLinger(0)
	}
}

// closePair closes a connection's two conns from any goroutine, and wakes
// the connection if it is parked, so that its copy path ends and reports
// at once. pk may be nil.
func (pk *parker) closePair(client, upstream net.Conn) {
	client.Close()
	upstream.Close()
	pk.closed(client)
}

// countingWriter counts the bytes written through it. It hides dst's
// ReadFrom, so it is only for conns the kernel cannot splice between.
type countingWriter struct {
	w io.Writer
	d *direction
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.d.add(int64(n))
	return n, err
}

// copyCounting copies src to dst as io.Copy does, counting as it goes.
func copyCounting(dst io.Writer, src io.Reader, d *direction) error {
	_, err := io.Copy(countingWriter{dst, d}, src)
	return err
}
