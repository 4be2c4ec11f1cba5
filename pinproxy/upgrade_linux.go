package pinproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/pinproxy/handover"
)

// How a link is stopped for a hand-over, and why no byte is lost, as the
// runtime does it (internal/poll, go1.26):
//
//   - A read deadline in the past stops each pump as it stops for a park:
//     a pump waiting for its source returns at once, and a read, or the
//     drain step of a splice, fails before it takes a byte. So nothing is
//     read after the deadline; what was not read stays queued in the
//     socket, which moves.
//   - A write under way is not stopped by it. One that cannot finish (its
//     peer reads nothing) is cut short by a write deadline after
//     writeGrace, and the bytes it had not written move with the
//     connection: from the pump's burst buffer (direction.pending), or,
//     for a splice, the pipe itself with the bytes in it (direction.pipe,
//     whose read end is handed over as the sockets are; the runtime's
//     own Splice would destroy the pipe with the bytes in it).
//   - A parked link has no pump: it leaves the parker's epoll set, and
//     moves as parked.
//
// What moves of a connection is its handover.Conn: the two sockets, the
// pipes' read ends, and a handover.ConnState (counters, half-closes,
// pending bytes). A data path that holds connections some other way
// stops them and fills the same record.

// writeGrace is how long a hand-over lets writes under way finish before
// it cuts the buffered ones short.
const writeGrace = time.Second

// Listener names on the wire: the proxy's own (keepalive preset on the
// listening socket by Listen, or not), and the caller's extra ones.
const (
	lnProxy  = "proxy"
	lnPreset = "proxy+keepalive"
	lnExtra  = "extra"
)

// Handoff hands every listener of the proxy (those given to Serve, and
// those made by Listen not served yet), every live connection, and the
// listeners in extra (the caller's own, an admin server's, say, which it
// must stop serving and close once Handoff returns committed) to the
// proxy of the process at the other end of peer, which calls Adopt (see
// package handover for the protocol). ctx bounds the whole hand-over,
// and with it how long the new process has to be ready: if it ends, or
// the other side fails, stalls or goes away before it serves, Handoff
// takes every connection back, accepts again, and returns an error with
// HandoffResult.Committed false. Once committed the proxy is closed, as
// after Shutdown, holding nothing. A Serve called meanwhile waits until
// the hand-over ends (see Serve). Handoff closes peer.
func (p *Proxy) Handoff(ctx context.Context, peer *handover.Peer, extra ...net.Listener) (res HandoffResult, err error) {
	start := p.clock()
	if !p.upg.begin() {
		peer.Close()
		return res, ErrUpgradeRunning
	}
	defer p.upg.end()
	var h *holding
	rep, err := handover.Handoff(ctx, peer, handover.Config{}, func(ctx context.Context) (*handover.Offer, error) {
		var o *handover.Offer
		h, o, err = p.hold(ctx, extra)
		res.Paused = p.clock().Sub(start)
		if o != nil {
			res.Conns, res.Listeners = len(o.Conns), len(o.Listeners)
			for _, c := range o.Conns {
				if c.State.Parked {
					res.Parked++
				}
				res.Pending += len(c.State.Pending[0]) + len(c.State.Pending[1]) + c.State.PipeBytes[0] + c.State.PipeBytes[1]
			}
		}
		return o, err
	})
	res.Committed, res.Ready, res.NewPID = rep.Serving, rep.Ready, rep.NewPID
	if h != nil {
		if rep.Serving {
			p.release(h)
		} else {
			p.giveBack(h)
		}
	}
	res.Took = p.clock().Sub(start)
	p.logHandoff(res, err)
	return res, err
}

// logHandoff counts and logs how a Handoff ended.
func (p *Proxy) logHandoff(res HandoffResult, err error) {
	if res.Committed {
		p.upg.ok.Add(1)
		p.log.LogAttrs(context.Background(), slog.LevelInfo, "upgrade: connections handed over",
			slog.Int("conns", res.Conns), slog.Int("parked", res.Parked), slog.Int("pending_bytes", res.Pending),
			slog.Int("listeners", res.Listeners), slog.Duration("paused", res.Paused), slog.Duration("took", res.Took),
			slog.Int("new_pid", res.NewPID))
		return
	}
	p.upg.failed.Add(1)
	p.log.LogAttrs(context.Background(), slog.LevelWarn, "upgrade failed; keeping every connection and serving on",
		slog.Int("conns", res.Conns), slog.Duration("took", res.Took), slog.Any("err", err))
}

// holding is what one Handoff holds still: the proxy's listeners, whose
// accepts it holds, and the links it stopped.
type holding struct {
	lns    []net.Listener
	m      *mover
	byLink map[*link]*conn
}

// hold stops everything a hand-over moves and describes it. Whatever it
// returns as h, even with an error, the caller gives back or releases.
func (p *Proxy) hold(ctx context.Context, extra []net.Listener) (h *holding, o *handover.Offer, err error) {
	// Rounds and drains close connections: none runs during a hand-over.
	p.rebalanceMu.Lock()
	p.mu.Lock()
	if p.closed || p.handover != nil {
		p.mu.Unlock()
		p.rebalanceMu.Unlock()
		return nil, nil, ErrProxyClosed
	}
	h = &holding{m: newMover()}
	for ln := range p.listeners {
		h.lns = append(h.lns, ln)
	}
	for ln := range p.presetKA { // made by Listen, perhaps not served yet
		if _, ok := p.listeners[ln]; !ok {
			h.lns = append(h.lns, ln)
		}
	}
	p.handover = make(chan struct{}) // a Serve from here on waits for the hand-over to end
	p.mu.Unlock()
	slices.SortFunc(h.lns, func(a, b net.Listener) int { return strings.Compare(a.Addr().String(), b.Addr().String()) })
	if err := p.holdAccepts(h.lns); err != nil {
		return h, nil, err
	}
	if err := p.waitStarted(ctx); err != nil {
		return h, nil, err
	}
	conns, err := p.liveConns()
	if err != nil {
		return h, nil, err
	}
	if err := p.stopAll(ctx, h.m, conns); err != nil {
		return h, nil, err
	}
	o, err = p.describe(h, conns, extra)
	return h, o, err
}

// describe is the offer of what h holds still: the links stopped, in
// conns' order (each upstream's oldest first, which the new proxy keeps
// by linking them as they come: its rounds move the newest).
func (p *Proxy) describe(h *holding, conns []*conn, extra []net.Listener) (*handover.Offer, error) {
	o := &handover.Offer{}
	var err error
	if o.State, err = json.Marshal(p.stateMsg()); err != nil {
		return nil, fmt.Errorf("pinproxy: upgrade: %w", err)
	}
	p.mu.Lock()
	for i, ln := range slices.Concat(h.lns, extra) {
		fd, err := listenerFD(ln)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		name := lnProxy
		if _, preset := p.presetKA[ln]; preset {
			name = lnPreset
		}
		if i >= len(h.lns) {
			name = lnExtra
		}
		o.Listeners = append(o.Listeners, handover.Listener{FD: fd, Addr: ln.Addr().String(), Name: name})
	}
	p.mu.Unlock()
	stopped := make(map[*link]bool, len(h.m.stopped))
	for _, l := range h.m.stopped {
		stopped[l] = true
	}
	h.byLink = make(map[*link]*conn, len(conns))
	for _, c := range conns {
		l := c.link
		h.byLink[l] = c
		if !stopped[l] {
			continue
		}
		cfd, ufd, ok := l.heldFDs() // an event loop's sockets
		var err1, err2 error
		if !ok {
			cfd, err1 = connFD(c.client)
			ufd, err2 = connFD(c.upstream)
		}
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("pinproxy: upgrade: connection from %s: %w", c.client.RemoteAddr(), err)
		}
		hc := handover.Conn{Client: cfd, Upstream: ufd, Pipes: [2]int{-1, -1}, State: handover.ConnState{
			Upstream: c.up.addr, Start: c.start.UnixNano(),
			Up: l.dirs[0].n.Load(), Down: l.dirs[1].n.Load(),
			Ended: [2]bool{l.dirs[0].ended, l.dirs[1].ended}, First: l.first.Load(),
			Parked:  h.m.handedParked(l),
			Pending: [2][]byte{l.dirs[0].pending, l.dirs[1].pending},
		}}
		for i := range l.dirs {
			if pp := l.dirs[i].pipe; pp != nil && pp.n > 0 {
				hc.State.PipeBytes[i] = pp.n
				hc.Pipes[i] = pp.r
			}
		}
		o.Conns = append(o.Conns, hc)
	}
	return o, nil
}

// holdAccepts makes Serve stop accepting on lns until releaseAccepts: a
// deadline in the past fails the Accept under way (or, for a listener
// the event loops take clients from, its socket leaves their sets), and
// Serve then waits.
// Clients that connect meanwhile wait in the listen queue.
func (p *Proxy) holdAccepts(lns []net.Listener) error {
	p.upg.mu.Lock()
	p.upg.held = make(chan struct{})
	p.upg.mu.Unlock()
	for _, ln := range lns {
		d, ok := ln.(interface{ SetDeadline(time.Time) error })
		if !ok {
			return fmt.Errorf("pinproxy: upgrade: listener %s (%T) has no SetDeadline: cannot hold its accepts", ln.Addr(), ln)
		}
		if err := d.SetDeadline(aLongTimeAgo); err != nil {
			return fmt.Errorf("pinproxy: upgrade: holding accepts on %s: %w", ln.Addr(), err)
		}
		p.holdRaw(ln)
	}
	return nil
}

// releaseAccepts undoes holdAccepts.
func (p *Proxy) releaseAccepts(lns []net.Listener) {
	for _, ln := range lns {
		if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
			d.SetDeadline(time.Time{})
		}
	}
	p.upg.mu.Lock()
	if p.upg.held != nil {
		close(p.upg.held)
		p.upg.held = nil
	}
	p.upg.mu.Unlock()
}

// waitStarted waits, once the accepts are held, until no Serve loop is
// still admitting a client it accepted and no accepted client is still
// being dialed for: every connection is then linked, with its link, and
// no more come until the accepts are let go.
//
// The first wait matters: a deadline stops the Accepts that wait, but
// not one whose accept(2) already took a connection off the queue, and
// such a client, admitted after the connections were listed, would stay
// in this process and be closed unread when it exits (a reset). A Serve
// loop counts itself in accepting before it calls Accept and out only
// after accept has counted the client in starting, so accepting at zero
// after the hold means every client taken off a queue is in starting,
// and every later Accept fails at its deadline. An event loop taking a
// listener's clients (accept_linux.go) counts its batch in accepting the
// same way, and looks whether the listener is paused only after, so a
// hold waits for a batch that began before it, and no batch begins
// after it.
func (p *Proxy) waitStarted(ctx context.Context) error {
	for p.accepting.Load() > 0 || p.starting.Load() > 0 {
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// liveConns lists every linked connection; each must be two TCP sockets:
// two *net.TCPConn, or an event loop's.
func (p *Proxy) liveConns() ([]*conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*conn
	for _, u := range slices.Concat(p.upstreams, p.leaving) {
		for c := u.head; c != nil; c = c.next {
			_, ok1 := c.client.(*net.TCPConn)
			_, ok2 := c.upstream.(*net.TCPConn)
			if !(ok1 && ok2 || c.looped.Load() != nil) || c.link == nil { // two TCP conns, or a loop's two sockets
				return nil, fmt.Errorf("pinproxy: upgrade: connection from %s to %s is not two TCP sockets (%T, %T): cannot hand it over",
					c.client.RemoteAddr(), u.addr, c.client, c.upstream)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// stopAll asks every connection's link to stop copying and waits until
// each has stopped or ended; after writeGrace it cuts buffered writes
// short.
func (p *Proxy) stopAll(ctx context.Context, m *mover, conns []*conn) error {
	todo := conns
	for len(todo) > 0 {
		var again []*conn
		for _, c := range todo {
			if !m.ask(c.link) {
				again = append(again, c)
			}
		}
		todo = again
		if len(todo) > 0 {
			t := time.NewTimer(time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				m.doneAsking()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
	m.doneAsking()
	grace := time.NewTimer(writeGrace)
	defer grace.Stop()
	select {
	case <-m.allIn:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-grace.C:
	}
	for _, c := range conns {
		l := c.link
		l.mu.Lock()
		if l.mv == m {
			l.upstream.SetWriteDeadline(aLongTimeAgo)
			l.client.SetWriteDeadline(aLongTimeAgo)
		}
		l.mu.Unlock()
	}
	select {
	case <-m.allIn:
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		left := m.left
		m.mu.Unlock()
		return fmt.Errorf("%w (%d connections had not stopped)", ctx.Err(), left)
	}
}

// takeStill counts l, which no goroutine copies (parked, or taken off
// its event loop), as stopped for m at once, with its bytes in flight;
// l.mu is held.
func (m *mover) takeStill(l *link) {
	l.mv = m
	m.asked()
	m.mu.Lock()
	if m.parked == nil {
		m.parked = make(map[*link]bool)
	}
	m.parked[l] = true
	m.mu.Unlock()
	m.report(l, true)
}

// ask asks l to stop for m, and reports whether it did (false: l is
// waking from a park; ask again). A parked link stops at once.
func (m *mover) ask(l *link) bool {
	if l.onLoop.Load() != nil {
		return m.askLooped(l)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state.Load() {
	case linkActive, linkParking:
		l.setState(linkMoving)
		l.mv = m
		m.asked()
		l.client.SetReadDeadline(aLongTimeAgo)
		l.upstream.SetReadDeadline(aLongTimeAgo)
	case linkParked:
		l.pk.unparkLocked(l)
		m.takeStill(l)
	case linkWaking:
		return false
	}
	return true // ended links are left to end
}

// unparkLocked takes a parked link out of the epoll set, for a
// hand-over, without giving it a goroutine: it is moving from here on.
// Call with l.mu held.
func (pk *parker) unparkLocked(l *link) {
	pk.mu.Lock()
	l.setState(linkMoving) // under pk.mu: a sweep never sees a parked link without its conns
	pk.forgetLocked(l)
	pk.mu.Unlock()
}

// held is called by l's run goroutine once its pumps stopped for a
// hand-over. It reports whether the link was handed over (its goroutine
// then ends); otherwise the link copies on.
func (l *link) held() bool {
	l.mu.Lock()
	m := l.mv
	l.mu.Unlock()
	ok := m != nil && l.dirs[0].err == nil && l.dirs[1].err == nil // an error closed the conns
	if m != nil {
		m.report(l, ok)
	}
	if ok {
		<-m.decided
		if m.moved {
			return true
		}
	}
	l.unhold()
	return false
}

// unhold sends a link a hand-over stopped back to copying.
func (l *link) unhold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mv = nil
	l.client.SetDeadline(time.Time{})
	l.upstream.SetDeadline(time.Time{})
	l.setState(linkActive)
}

// ended marks l ended; a hand-over waiting for it stops waiting.
func (l *link) ended() {
	l.mu.Lock()
	m := l.mv
	l.mv = nil
	l.setState(linkEnded)
	l.mu.Unlock()
	if m != nil {
		m.report(l, false)
	}
}

// giveBack ends a hand-over that failed: every link it stopped copies
// again, parked ones park again, and the listeners accept again.
func (p *Proxy) giveBack(h *holding) {
	m := h.m
	m.mu.Lock()
	parked := m.parked
	m.mu.Unlock()
	for l := range parked {
		l.unhold()
		if p.loops.reattach(l) {
			continue
		}
		l.setState(linkParking)
		if !l.pk.park(l) {
			l.setState(linkActive)
			go l.run()
		}
	}
	m.decide(false) // the others' goroutines wait in held
	p.releaseAccepts(h.lns)
	p.endHold()
}

// endHold lets Serve calls made during the hand-over go on, and rounds
// run again.
func (p *Proxy) endHold() {
	p.mu.Lock()
	close(p.handover)
	p.handover = nil
	p.mu.Unlock()
	p.rebalanceMu.Unlock()
}

// release drops this process's hold on what it handed over (closing a
// descriptor that another process holds sends nothing to the peer), and
// closes the proxy as Shutdown would, with nothing left to wait for.
func (p *Proxy) release(h *holding) {
	p.stop()
	p.mu.Lock()
	p.closed = true
	for _, ln := range h.lns {
		delete(p.listeners, ln)
	}
	p.mu.Unlock()
	for _, ln := range h.lns {
		ln.Close()
	}
	m := h.m
	m.decide(true)
	for _, l := range m.stopped {
		c := h.byLink[l]
		l.pk.remove(l)
		l.mu.Lock()
		l.setState(linkEnded)
		l.mv = nil
		l.mu.Unlock()
		c.client.Close()
		c.upstream.Close()
		l.closeHeld()
		p.mu.Lock()
		p.unlinkLocked(c)
		p.mu.Unlock()
		p.active.Add(-1)
		p.handlers.Done()
	}
	p.releaseAccepts(nil)
	p.kill()
	p.endHold()
}

// stateMsg describes the proxy's counters and upstreams for the new
// process.
func (p *Proxy) stateMsg() wireState {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := wireState{
		Totals: wireTotals{
			Accepted: p.accepted.Load(), Rejected: p.rejected.Load(), Unrouted: p.unrouted.Load(),
			LocalErrors: p.localErrors.Load(), Moves: p.moves,
			Upgrades: p.upg.ok.Load(), UpgradesFailed: p.upg.failed.Load(),
		},
	}
	for _, u := range slices.Concat(p.upstreams, p.leaving) {
		s.Upstreams = append(s.Upstreams, wireUpstream{
			Addr: u.addr, Dials: u.dials, Failures: u.failures, Moved: u.moved,
			BytesUp: u.bytes.up.Load(), BytesDown: u.bytes.down.Load(),
			LastFailure: unixNano(u.lastFailure), LastError: u.lastError,
			BackoffUntil: unixNano(u.backoffUntil), UpSince: unixNano(u.upSince),
			Answered: u.answered, LastFailed: u.lastFailed, State: int8(u.state), Rise: u.rise, Fall: u.fall,
			Removed: u.removed, RemovedAt: unixNano(u.removedAt),
		})
	}
	return s
}

// Adopt takes the listeners and connections a proxy in another process
// hands over with Handoff, from the other end of peer. Call it on a proxy
// made by New that serves nothing yet. It returns once it has received
// everything; nothing is used yet: serve the returned listeners (Serve
// waits), start what else the process serves, then call Adopted.Ready,
// which waits for the old process to commit and then starts it all:
// the connections copy again in this proxy, with their upstreams,
// counters and bytes in flight, and the proxy-wide and per-upstream
// counters go on from the old proxy's values. If anything fails first,
// or ctx ends, Adopt closes what it received (the old process still
// holds it all) and returns an error. Upstreams the old proxy had that
// this one's Config does not list are kept as removed, with their
// connections.
func (p *Proxy) Adopt(ctx context.Context, peer *handover.Peer) (*Adopted, error) {
	p.mu.Lock()
	if p.closed || p.handover != nil {
		p.mu.Unlock()
		peer.Close()
		return nil, errors.New("pinproxy: adopt: the proxy is closed or in a hand-over")
	}
	p.handover = make(chan struct{}) // Serve waits for the commit
	p.mu.Unlock()
	ad, err := handover.Adopt(ctx, peer)
	if err != nil {
		p.endAdopt(false)
		return nil, fmt.Errorf("pinproxy: adopt: %w", err)
	}
	st, err := parseState(ad.State)
	if err != nil {
		for _, l := range ad.Listeners {
			unix.Close(l.FD)
		}
		for _, c := range ad.Conns {
			closeConnFDs(c)
		}
		ad.Abort()
		p.endAdopt(false)
		return nil, fmt.Errorf("pinproxy: adopt: %w", err)
	}
	a := &Adopted{OldPID: ad.OldPID, p: p}
	for _, l := range ad.Listeners {
		f := os.NewFile(uintptr(l.FD), "listener "+l.Addr)
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			p.log.LogAttrs(ctx, slog.LevelError, "adopt: cannot take a listener", slog.String("addr", l.Addr), slog.Any("err", err))
			continue
		}
		switch l.Name {
		case lnExtra:
			a.Extra = append(a.Extra, ln)
			continue
		case lnPreset:
			p.mu.Lock()
			p.presetKA[ln] = struct{}{}
			p.mu.Unlock()
		}
		a.Listeners = append(a.Listeners, ln)
	}
	for _, c := range ad.Conns {
		a.Conns++
		if c.State.Parked {
			a.Parked++
		}
	}
	a.ready = func(ctx context.Context) error {
		err := ad.Ready(ctx, func() { p.startAdopted(st, a, ad.Conns) })
		if err != nil {
			p.dropAdopted(a, ad.Conns)
			return fmt.Errorf("pinproxy: adopt: %w", err)
		}
		return nil
	}
	return a, nil
}

// endAdopt lets Serve calls go on after an adoption: they serve, or
// (closed) return ErrProxyClosed.
func (p *Proxy) endAdopt(closed bool) {
	if closed {
		p.stop()
	}
	p.mu.Lock()
	p.closed = p.closed || closed
	close(p.handover)
	p.handover = nil
	p.mu.Unlock()
	if closed {
		p.kill()
	}
}

// startAdopted is the commit in the new process: the counters go on from
// the old proxy's, the connections copy (parked ones park), and the
// listeners accept.
func (p *Proxy) startAdopted(st wireState, a *Adopted, conns []handover.Conn) {
	p.adoptCounters(st)
	p.mu.Lock()
	for _, ln := range a.Listeners { // handed over by a Handoff from here on, served or not yet
		p.listeners[ln] = struct{}{}
	}
	p.mu.Unlock()
	n := 0
	for _, c := range conns {
		if p.adoptConn(c) {
			n++
		}
	}
	p.endAdopt(false)
	p.log.LogAttrs(context.Background(), slog.LevelInfo, "upgrade: adopted",
		slog.Int("conns", n), slog.Int("parked", a.Parked), slog.Int("listeners", len(a.Listeners)+len(a.Extra)),
		slog.Int("from_pid", a.OldPID))
}

// dropAdopted closes everything adopted, untouched (the old process
// holds it all), and the proxy.
func (p *Proxy) dropAdopted(a *Adopted, conns []handover.Conn) {
	for _, c := range conns {
		closeConnFDs(c)
	}
	for _, ln := range slices.Concat(a.Listeners, a.Extra) {
		ln.Close()
	}
	p.endAdopt(true)
}

// closeConnFDs closes a received connection's descriptors.
func closeConnFDs(c handover.Conn) {
	for _, fd := range []int{c.Client, c.Upstream, c.Pipes[0], c.Pipes[1]} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// adoptCounters adds the old proxy's counters to p's, and takes its
// upstreams' state.
func (p *Proxy) adoptCounters(s wireState) {
	t := s.Totals
	p.accepted.Add(t.Accepted)
	p.rejected.Add(t.Rejected)
	p.unrouted.Add(t.Unrouted)
	p.localErrors.Add(t.LocalErrors)
	p.upg.ok.Add(t.Upgrades + 1)
	p.upg.failed.Add(t.UpgradesFailed)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moves += t.Moves
	for _, w := range s.Upstreams {
		u := p.upstreamLocked(w.Addr)
		u.dials += w.Dials
		u.failures += w.Failures
		u.moved += w.Moved
		u.bytes.up.Add(w.BytesUp)
		u.bytes.down.Add(w.BytesDown)
		u.lastFailure, u.lastError = fromUnixNano(w.LastFailure), w.LastError
		u.backoffUntil, u.upSince = fromUnixNano(w.BackoffUntil), fromUnixNano(w.UpSince)
		u.answered, u.lastFailed = w.Answered, w.LastFailed
		u.state, u.rise, u.fall = health(w.State), w.Rise, w.Fall
		if u.removed && w.Removed {
			u.removedAt = fromUnixNano(w.RemovedAt)
		}
	}
}

// upstreamLocked returns the upstream of addr: in the list, or one kept
// as removed (added to p.leaving) for the old proxy's connections to it.
func (p *Proxy) upstreamLocked(addr string) *upstream {
	for _, u := range slices.Concat(p.upstreams, p.leaving) {
		if u.addr == addr {
			return u
		}
	}
	u := &upstream{addr: addr, removed: true, removedAt: p.clock()}
	p.leaving = append(p.leaving, u)
	slices.SortFunc(p.leaving, func(a, b *upstream) int { return strings.Compare(a.addr, b.addr) })
	return u
}

// adoptConn links a handed-over connection and starts its copy path:
// parked again if it was parked. It reports whether it could; a
// connection it cannot take is closed and logged.
func (p *Proxy) adoptConn(hc handover.Conn) bool {
	client, err1 := p.fileConn(hc.Client, "client")
	upc, err2 := p.fileConn(hc.Upstream, "upstream")
	var pipes [2]*splicePipe
	for i, n := range hc.State.PipeBytes {
		if n > 0 {
			pipes[i] = newSplicePipe(hc.Pipes[i], -1, n) // closed by its cleanup once written out
		}
	}
	if err := errors.Join(err1, err2); err != nil {
		for _, c := range []net.Conn{client, upc} {
			if c != nil {
				c.Close()
			}
		}
		p.log.LogAttrs(context.Background(), slog.LevelError, "adopt: cannot take a connection",
			slog.String("upstream", hc.State.Upstream), slog.Any("err", err))
		return false
	}
	wc := hc.State
	p.mu.Lock()
	u := p.upstreamLocked(wc.Upstream)
	c := &conn{client: client, upstream: upc, up: u, start: time.Unix(0, wc.Start)}
	p.linkLocked(c)
	p.handlers.Add(1)
	p.mu.Unlock()
	p.active.Add(1)
	l := newLink(client, upc, &p.bufs, &u.bytes, func(r spliceResult) { p.finish(c, r) })
	c.link = l
	clean := int32(0)
	for i := range l.dirs {
		l.dirs[i].ended = wc.Ended[i]
		l.dirs[i].pending = wc.Pending[i]
		l.dirs[i].pipe = pipes[i]
		if wc.Ended[i] {
			clean++
		}
	}
	l.dirs[0].n.Store(wc.Up)
	l.dirs[1].n.Store(wc.Down)
	l.clean.Store(clean)
	l.first.Store(wc.First)
	if p.loops != nil {
		c.looped.Store(l)
		if p.loops.attach(l, [2]bool{}) {
			return true
		}
	}
	p.park.add(l)
	if wc.Parked && l.pk != nil {
		l.setState(linkParking)
		if l.pk.park(l) {
			return true
		}
		l.setState(linkActive)
	}
	go l.run()
	return true
}

// fileConn makes a net.Conn of a received socket descriptor, which it
// closes (the conn holds a duplicate), with this proxy's keepalive:
// net.FileConn turns on its own default (15 s) over whatever the socket
// had, and the old process may not have set the upstream's yet (see
// Proxy.kaLater).
func (p *Proxy) fileConn(fd int, what string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), what)
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s socket: %w", what, err)
	}
	p.setKeepAlive(c)
	return c, nil
}

// connFD and listenerFD return the descriptor of a socket, which stays
// open while the hand-over holds the connection (no rebalance round,
// drain or parker closes it meanwhile).
func connFD(c net.Conn) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("%T has no descriptor", c)
	}
	return rawFD(sc)
}

func listenerFD(ln net.Listener) (int, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("pinproxy: upgrade: listener %s (%T) has no descriptor", ln.Addr(), ln)
	}
	fd, err := rawFD(sc)
	if err != nil {
		return -1, fmt.Errorf("pinproxy: upgrade: listener %s: %w", ln.Addr(), err)
	}
	return fd, nil
}

func rawFD(sc syscall.Conn) (int, error) {
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(s uintptr) { fd = int(s) }); err != nil {
		return -1, err
	}
	return fd, nil
}
