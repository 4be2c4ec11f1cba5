package pinproxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Upgrades. A proxied connection is two sockets and a few counters, and a
// socket is a file descriptor that a Unix socket can pass to another
// process (SCM_RIGHTS). Handoff passes every listener and every live
// connection of the proxy, with its upstream, counters, half-close and
// park state and the bytes it had read but not yet written, to a new
// process, whose proxy takes them with Adopt. No connection is closed or
// reset, no byte is lost, repeated or reordered, and clients keep
// connecting throughout: the listening sockets are the same kernel
// sockets in both processes, and the ones that arrive while the
// connections move wait in their listen queue.
//
// The hand-over is all-or-nothing:
//
//  1. The old proxy stops accepting, waits until every client it has
//     taken off a listen queue is linked to its upstream, and stops every
//     connection's copying: nothing more is read from any socket; a write
//     under way either completes or is cut short, and what was not
//     written goes with the connection. It then sends everything.
//  2. The new proxy takes nothing until it has received everything; then
//     it says so.
//  3. The old proxy then commits: from there on the connections are the
//     new proxy's, and the old one drops its copies of the sockets
//     (closing a descriptor that another process holds sends nothing to
//     the peer). Until then it can take everything back and serve on; it
//     does if the new process fails, goes away, or ctx ends first.
//  4. The new proxy copies again, serves the listeners, and reports ready.
//
// The wire format is in handoff_wire.go; the Linux side in
// upgrade_linux.go. Off Linux both calls return an error that wraps
// errors.ErrUnsupported.

// ErrUpgradeRunning is returned by Handoff while another hand-over of the
// same proxy is under way.
var ErrUpgradeRunning = errors.New("pinproxy: an upgrade is already under way")

// HandoffResult says what a Handoff moved, or tried to.
type HandoffResult struct {
	// Committed is true once the new process has taken every connection
	// and listener: the old proxy then holds nothing, whatever the
	// error. When false, the old proxy has everything back and serves on.
	Committed bool
	// Ready is true when the new process reported it serves.
	Ready bool

	Conns     int           // connections moved (or that would have been)
	Parked    int           // of which parked
	Pending   int           // bytes read but not written yet, moved with them
	Listeners int           // listeners moved, the proxy's and the caller's
	Paused    time.Duration // from the call until every connection had stopped copying
	Took      time.Duration // from the call until the new process was ready (or it failed)
	NewPID    int           // the new process's, as it said
}

// Adopted is what Adopt received.
type Adopted struct {
	// Listeners are the old proxy's listeners, to pass to Serve; Extra
	// are the listeners its caller gave Handoff, in that order.
	Listeners []net.Listener
	Extra     []net.Listener
	Conns     int // connections adopted
	Parked    int // of which parked
	OldPID    int // the process they came from

	ready func() error
}

// Ready tells the old process that this one serves: call it once the
// listeners are being served. The old process waits for it before it
// reports the upgrade done (and, as cmd/pinproxy does, exits).
func (a *Adopted) Ready() error {
	if a.ready == nil {
		return nil
	}
	f := a.ready
	a.ready = nil
	return f()
}

// upgrades is a Proxy's upgrade state.
type upgrades struct {
	ok, failed atomic.Int64

	mu      sync.Mutex
	running bool
	held    chan struct{} // non-nil while Handoff holds the accepts; closed when it lets them go
}

// acceptsHeld reports, after an Accept on ln failed, whether a Handoff
// was holding the accepts (it makes Accept fail with a deadline); then it
// waits until the accepts are let go again, and Serve accepts on.
func (p *Proxy) acceptsHeld(ln net.Listener) bool {
	p.upg.mu.Lock()
	ch := p.upg.held
	p.upg.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
	case <-p.stopCtx.Done():
	}
	return true
}

// mover is one Handoff's view of the links it holds.
type mover struct {
	mu      sync.Mutex
	left    int            // links asked to stop that have not said so yet
	stopped []*link        // links stopped, to hand over
	parked  map[*link]bool // of which parked (they have no goroutine)
	allIn   chan struct{}  // closed when left reaches 0 after every ask
	asking  bool           // asks still being made: allIn waits

	decided chan struct{} // closed when the hand-over is committed or given up
	moved   bool          // committed; read after decided
}

func newMover() *mover {
	return &mover{allIn: make(chan struct{}), decided: make(chan struct{}), asking: true}
}

// report records that l stopped (ok) or ended before it could.
func (m *mover) report(l *link, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ok {
		m.stopped = append(m.stopped, l)
	}
	m.left--
	if m.left == 0 && !m.asking {
		close(m.allIn)
	}
}

// asked records that one more link will report.
func (m *mover) asked() {
	m.mu.Lock()
	m.left++
	m.mu.Unlock()
}

// doneAsking says every link has been asked.
func (m *mover) doneAsking() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asking = false
	if m.left == 0 {
		close(m.allIn)
	}
}

// decide ends the hold: moved, the links are the new process's.
func (m *mover) decide(moved bool) {
	m.moved = moved
	close(m.decided)
}
