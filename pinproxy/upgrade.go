package pinproxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Upgrades. A proxied connection is two sockets and a few counters, and a
// socket is a file descriptor that a Unix socket can pass to another
// process. Handoff passes every listener and every live connection of the
// proxy, with its upstream, counters, half-close and park state and the
// bytes it had read but not yet written, to a new process, whose proxy
// takes them with Adopt. No connection is closed or reset, no byte is
// lost, repeated or reordered, and clients keep connecting throughout:
// the listening sockets are the same kernel sockets in both processes,
// and the clients that arrive while the connections move wait in their
// listen queue.
//
// The protocol, its wire format and the descriptor passing are package
// handover's; this proxy's part is to stop its connections and describe
// them (upgrade_linux.go hold), to take them back when the hand-over
// fails (giveBack) or drop its copies once the new process serves
// (release), and, in the new process, to take what came (Adopt) and
// start it at the commit. The hand-over is all-or-nothing until the new
// process serves: until then the old proxy keeps every descriptor, and
// the new one touches none.
//
// What a hand-over needs of the data path, whatever holds the
// connections (a goroutine per connection today, event loops perhaps
// tomorrow): the seam is handover.Conn, and five steps per connection,
// done today by hold, giveBack, release and adoptConn in
// upgrade_linux.go:
//
//   - stop: nothing more is read from either socket; a write under way
//     finishes, or is cut short after writeGrace; the connection says it
//     stopped, or that it ended meanwhile (it is then left out);
//   - describe: its handover.Conn, that is the client's and the
//     upstream's descriptors, the read end of a pipe that still holds
//     bytes, and its handover.ConnState: each direction's byte count,
//     which directions ended cleanly and which side first, whether it
//     was idle (parked), and the bytes read and not yet written (at most
//     handover.MaxPending a direction);
//   - resume, when the hand-over fails: copy again from where it
//     stopped, the pending bytes first;
//   - forget, once the new process serves: close its descriptors with
//     neither shutdown(2) nor a reset (closing a descriptor that the new
//     process holds too sends nothing), and count it out as handed over,
//     not closed;
//   - adopt, in the new process, at the commit: start a connection from
//     a handover.Conn, writing its pending bytes (or its pipe's) first.
//
// Off Linux Handoff and Adopt return an error that wraps
// errors.ErrUnsupported.

// ErrUpgradeRunning is returned by Handoff while another hand-over of the
// same proxy is under way.
var ErrUpgradeRunning = errors.New("pinproxy: an upgrade is already under way")

// HandoffResult says what a Handoff moved, or tried to.
type HandoffResult struct {
	// Committed is true once the new process serves everything: the old
	// proxy then holds nothing, and is closed. When false, the old proxy
	// has everything back and serves on.
	Committed bool
	// Ready is true when the new process reported it had started.
	Ready bool

	Conns     int           // connections moved (or that would have been)
	Parked    int           // of which parked
	Pending   int           // bytes read but not written yet, moved with them
	Listeners int           // listeners moved, the proxy's and the caller's
	Paused    time.Duration // from the call until every connection had stopped copying
	Took      time.Duration // from the call until the new process served (or it failed)
	NewPID    int           // the new process's, as it said
}

// Adopted is what Adopt received. Nothing of it is used until Ready.
type Adopted struct {
	// Listeners are the old proxy's listeners, to pass to Serve; Extra
	// are the listeners its caller gave Handoff, in that order, for the
	// caller to serve once Ready returns nil.
	Listeners []net.Listener
	Extra     []net.Listener
	Conns     int // connections adopted
	Parked    int // of which parked
	OldPID    int // the process they came from

	p     *Proxy
	ready func(ctx context.Context) error
}

// Ready tells the old process that this one has started, and waits until
// it commits (ctx bounds the wait): then the adopted connections copy
// again, the Serve calls on Listeners accept, and the old process lets
// everything go and exits. Call it once Serve has been called on each of
// Listeners (Serve waits for the commit). If the old process does not
// commit (it gave up, as it does when this one is not ready within its
// timeout, or went away), Ready closes everything adopted, untouched,
// closes the proxy (Serve returns ErrProxyClosed), and returns an error:
// the old process serves on with everything, and this one must serve
// nothing (exit with a failure status).
func (a *Adopted) Ready(ctx context.Context) error {
	if a.ready == nil {
		return errors.New("pinproxy: Adopted.Ready called twice")
	}
	f := a.ready
	a.ready = nil
	return f(ctx)
}

// upgrades is a Proxy's upgrade state.
type upgrades struct {
	ok, failed atomic.Int64

	mu      sync.Mutex
	running bool
	held    chan struct{} // non-nil while Handoff holds the accepts; closed when it lets them go
	// raws are the listeners Serve accepts from as bare sockets
	// (accept_linux.go), whose duplicates a hold holds too.
	raws map[net.Listener]*rawListener
}

// begin marks a hand-over under way, or reports that one is.
func (u *upgrades) begin() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.running {
		return false
	}
	u.running = true
	return true
}

func (u *upgrades) end() {
	u.mu.Lock()
	u.running = false
	u.mu.Unlock()
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
