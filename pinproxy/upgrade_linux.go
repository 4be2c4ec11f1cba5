package pinproxy

import (
	"context"
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
)

// How a link is stopped for a hand-over (see upgrade.go), and why no byte
// is lost, as the runtime does it (internal/poll, go1.26):
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

// writeGrace is how long a hand-over lets writes under way finish before
// it cuts the buffered ones short.
const writeGrace = time.Second

// Handoff hands every listener given to Serve, every live connection,
// and the listeners in extra (the caller's own, an admin server's, say,
// which it must stop serving and close once Handoff returns committed) to
// the proxy of another process, which calls Adopt on the other end of uc,
// a Unix socket of type SOCK_SEQPACKET ("unixpacket"). See upgrade.go for
// the steps. ctx bounds the whole hand-over: if it ends, or the other
// side fails or goes away before it has everything, Handoff takes every
// connection back, accepts again, and returns an error with
// HandoffResult.Committed false. Once committed, the proxy is closed, as
// after Shutdown, holding nothing; the error is then about the new
// process's ready report only. A Serve called meanwhile waits until the
// hand-over ends (see Serve). Handoff closes uc.
func (p *Proxy) Handoff(ctx context.Context, uc *net.UnixConn, extra ...net.Listener) (res HandoffResult, err error) {
	t0 := time.Now()
	defer uc.Close()
	p.upg.mu.Lock()
	if p.upg.running {
		p.upg.mu.Unlock()
		return res, ErrUpgradeRunning
	}
	p.upg.running = true
	p.upg.mu.Unlock()
	defer func() {
		p.upg.mu.Lock()
		p.upg.running = false
		p.upg.mu.Unlock()
		res.Took = time.Since(t0)
		switch {
		case res.Committed:
			p.upg.ok.Add(1)
			attrs := []slog.Attr{
				slog.Int("conns", res.Conns), slog.Int("parked", res.Parked), slog.Int("pending_bytes", res.Pending),
				slog.Int("listeners", res.Listeners), slog.Duration("paused", res.Paused), slog.Duration("took", res.Took),
				slog.Int("new_pid", res.NewPID),
			}
			if err != nil {
				attrs = append(attrs, slog.Any("err", err))
			}
			p.log.LogAttrs(context.Background(), slog.LevelInfo, "upgrade: connections handed over", attrs...)
		default:
			p.upg.failed.Add(1)
			p.log.LogAttrs(context.Background(), slog.LevelWarn, "upgrade failed; keeping every connection and serving on",
				slog.Int("conns", res.Conns), slog.Duration("took", res.Took), slog.Any("err", err))
		}
	}()
	uc.SetWriteBuffer(2 * wireMaxMessage) // a message must fit (the kernel caps it at twice wmem_max)
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(aLongTimeAgo) })
	defer stop()
	cause := func(err error) error { // the context's cause, when it cut a read or write short
		if ctx.Err() != nil {
			return fmt.Errorf("pinproxy: upgrade: %w", context.Cause(ctx))
		}
		return err
	}

	// Rounds and drains close connections: none runs during a hand-over.
	p.rebalanceMu.Lock()
	defer p.rebalanceMu.Unlock()
	p.mu.Lock()
	closed := p.closed
	lns := make([]net.Listener, 0, len(p.listeners))
	for ln := range p.listeners {
		lns = append(lns, ln)
	}
	if !closed { // a Serve from here on waits for the hand-over to end
		p.handover = make(chan struct{})
	}
	p.mu.Unlock()
	if closed {
		return res, ErrProxyClosed
	}
	defer func() { // after the rollback, if any (defers run last first)
		p.mu.Lock()
		close(p.handover)
		p.handover = nil
		p.mu.Unlock()
	}()
	slices.SortFunc(lns, func(a, b net.Listener) int { return strings.Compare(a.Addr().String(), b.Addr().String()) })
	if err := p.holdAccepts(lns); err != nil {
		p.releaseAccepts(lns)
		return res, err
	}
	m := newMover()
	committed := false
	defer func() {
		if !committed {
			p.giveBack(m)
			p.releaseAccepts(lns)
		}
	}()
	if err := p.waitStarted(ctx); err != nil {
		return res, cause(err)
	}
	conns, err := p.liveConns()
	if err != nil {
		return res, err
	}
	res.Conns = len(conns)
	if err := p.stopAll(ctx, m, conns); err != nil {
		return res, cause(err)
	}
	res.Paused = time.Since(t0)

	// Everything is still; describe it.
	// The links stopped in whatever order their goroutines ran; they go
	// in conns' order, each upstream's oldest first, which the new proxy
	// keeps by linking them as they come: its rounds move the newest.
	byLink := make(map[*link]*conn, len(conns))
	stopped := make(map[*link]bool, len(m.stopped))
	for _, l := range m.stopped {
		stopped[l] = true
	}
	var moving []*link
	for _, c := range conns {
		byLink[c.link] = c
		if stopped[c.link] {
			moving = append(moving, c.link)
		}
	}
	res.Conns = len(moving)
	hello := p.helloMsg(len(lns)+len(extra), len(moving))
	var lfds []int
	var wls []wireListener
	for i, ln := range slices.Concat(lns, extra) {
		fd, err := listenerFD(ln)
		if err != nil {
			return res, err
		}
		p.mu.Lock()
		_, preset := p.presetKA[ln]
		p.mu.Unlock()
		lfds = append(lfds, fd)
		wls = append(wls, wireListener{Addr: ln.Addr().String(), Preset: preset, Extra: i >= len(lns)})
	}
	res.Listeners = len(wls)
	b, err := encodeMsg(msgHello, hello)
	if err != nil {
		return res, err
	}
	if err := sendMsg(uc, b, nil); err != nil {
		return res, cause(err)
	}
	batch := wireBatch{Listeners: wls}
	fds := lfds
	size := 0
	flush := func() error {
		b, err := encodeMsg(msgBatch, batch)
		if err != nil {
			return err
		}
		if err := sendMsg(uc, b, fds); err != nil {
			return cause(err)
		}
		batch, fds, size = wireBatch{}, nil, 0
		return nil
	}
	for _, l := range moving {
		c := byLink[l]
		cfd, ufd, ok := l.heldFDs() // an event loop's sockets
		var err1, err2 error
		if !ok {
			cfd, err1 = connFD(c.client)
			ufd, err2 = connFD(c.upstream)
		}
		if err := errors.Join(err1, err2); err != nil {
			return res, fmt.Errorf("pinproxy: upgrade: connection from %s: %w", c.client.RemoteAddr(), err)
		}
		wc := wireConn{
			Upstream: c.up.addr, Start: c.start.UnixNano(),
			Up: l.dirs[0].n.Load(), Down: l.dirs[1].n.Load(),
			Ended: [2]bool{l.dirs[0].ended, l.dirs[1].ended}, First: l.first.Load(),
			Parked:  m.handedParked(l),
			Pending: [2][]byte{l.dirs[0].pending, l.dirs[1].pending},
		}
		cfds := []int{cfd, ufd}
		for i := range l.dirs {
			if p := l.dirs[i].pipe; p != nil && p.n > 0 {
				wc.PipeBytes[i] = p.n
				cfds = append(cfds, p.r)
			}
		}
		if wc.Parked {
			res.Parked++
		}
		res.Pending += len(wc.Pending[0]) + len(wc.Pending[1]) + wc.PipeBytes[0] + wc.PipeBytes[1]
		n := 200 + 4*(len(wc.Pending[0])+len(wc.Pending[1]))/3
		if len(fds)+len(cfds) > wireMaxFDs || size+n > wireMaxMessage*3/4 {
			if err := flush(); err != nil {
				return res, err
			}
		}
		batch.Conns = append(batch.Conns, wc)
		fds = append(fds, cfds...)
		size += n
	}
	if len(fds) > 0 || len(batch.Listeners) > 0 {
		if err := flush(); err != nil {
			return res, err
		}
	}
	b, _ = encodeMsg(msgEnd, wireEnd{Listeners: len(wls), Conns: len(moving)})
	if err := sendMsg(uc, b, nil); err != nil {
		return res, cause(err)
	}
	var have struct{}
	if _, err := recvMsg(uc, msgHave, &have); err != nil {
		return res, cause(fmt.Errorf("pinproxy: upgrade: waiting for the new process to say it has everything: %w", err))
	}
	b, _ = encodeMsg(msgCommit, struct{}{})
	if err := sendMsg(uc, b, nil); err != nil {
		return res, cause(err)
	}

	// Committed: the new process owns it all. Drop this process's
	// copies; closing a descriptor another process holds sends nothing.
	committed = true
	res.Committed = true
	p.release(m, byLink, lns)
	var ready wireReady
	if _, err := recvMsg(uc, msgReady, &ready); err != nil {
		return res, cause(fmt.Errorf("pinproxy: upgrade: the new process took everything but did not report ready: %w", err))
	}
	res.Ready, res.NewPID = true, ready.PID
	return res, nil
}

// holdAccepts makes Serve stop accepting on lns until releaseAccepts: a
// deadline in the past fails the Accept under way, and Serve then waits.
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
// and every later Accept fails at its deadline.
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

// liveConns lists every linked connection; each must be two TCP sockets.
func (p *Proxy) liveConns() ([]*conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*conn
	for _, u := range slices.Concat(p.upstreams, p.leaving) {
		for c := u.head; c != nil; c = c.next {
			_, ok1 := c.client.(*net.TCPConn)
			_, ok2 := c.upstream.(*net.TCPConn)
			if !ok1 || !ok2 || c.link == nil {
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
		l.state.Store(linkMoving)
		l.mv = m
		m.asked()
		l.client.SetReadDeadline(aLongTimeAgo)
		l.upstream.SetReadDeadline(aLongTimeAgo)
	case linkParked:
		l.pk.unparkLocked(l)
		l.mv = m
		m.asked()
		m.mu.Lock()
		if m.parked == nil {
			m.parked = make(map[*link]bool)
		}
		m.parked[l] = true
		m.mu.Unlock()
		m.report(l, true)
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
	l.state.Store(linkMoving) // under pk.mu: a sweep never sees a parked link without its conns
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
	l.state.Store(linkActive)
}

// ended marks l ended; a hand-over waiting for it stops waiting.
func (l *link) ended() {
	l.mu.Lock()
	m := l.mv
	l.mv = nil
	l.state.Store(linkEnded)
	l.mu.Unlock()
	if m != nil {
		m.report(l, false)
	}
}

// giveBack ends a hand-over that failed: every link it stopped copies
// again, parked ones park again.
func (p *Proxy) giveBack(m *mover) {
	m.mu.Lock()
	parked := m.parked
	m.mu.Unlock()
	for l := range parked {
		l.unhold()
		if p.loops.reattach(l) {
			continue
		}
		l.state.Store(linkParking)
		if !l.pk.park(l) {
			l.state.Store(linkActive)
			go l.run()
		}
	}
	m.decide(false) // the others' goroutines wait in held
}

// release drops this process's hold on what it handed over, and closes
// the proxy as Shutdown would, with nothing left to wait for.
func (p *Proxy) release(m *mover, byLink map[*link]*conn, lns []net.Listener) {
	p.stop()
	p.mu.Lock()
	p.closed = true
	for _, ln := range lns {
		delete(p.listeners, ln)
	}
	p.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	m.decide(true)
	for _, l := range m.stopped {
		c := byLink[l]
		l.pk.remove(l)
		l.mu.Lock()
		l.state.Store(linkEnded)
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
}

// helloMsg describes the proxy's counters and upstreams.
func (p *Proxy) helloMsg(listeners, conns int) wireHello {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := wireHello{
		Version: wireVersion, PID: os.Getpid(), Listeners: listeners, Conns: conns,
		Totals: wireTotals{
			Accepted: p.accepted.Load(), Rejected: p.rejected.Load(), Unrouted: p.unrouted.Load(),
			LocalErrors: p.localErrors.Load(), Moves: p.moves,
			Upgrades: p.upg.ok.Load(), UpgradesFailed: p.upg.failed.Load(),
		},
	}
	unixNano := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixNano()
	}
	for _, u := range slices.Concat(p.upstreams, p.leaving) {
		h.Upstreams = append(h.Upstreams, wireUpstream{
			Addr: u.addr, Dials: u.dials, Failures: u.failures, Moved: u.moved,
			BytesUp: u.bytes.up.Load(), BytesDown: u.bytes.down.Load(),
			LastFailure: unixNano(u.lastFailure), LastError: u.lastError,
			BackoffUntil: unixNano(u.backoffUntil), UpSince: unixNano(u.upSince),
			Answered: u.answered, LastFailed: u.lastFailed, State: int8(u.state), Rise: u.rise, Fall: u.fall,
			Removed: u.removed, RemovedAt: unixNano(u.removedAt),
		})
	}
	return h
}

// Adopt takes the listeners and connections a proxy in another process
// hands over with Handoff on the other end of uc. Call it on a proxy made
// by New that serves nothing yet. It adopts nothing until it has received
// everything; then it says so, and once the old process commits, the
// connections copy again in this proxy, with their upstreams, counters,
// and bytes in flight, and the proxy-wide and per-upstream counters go on
// from the old proxy's values. Serve the returned listeners, then call
// Adopted.Ready. If anything fails first, or ctx ends, Adopt closes what
// it received (the old process still holds it all) and returns an error.
// Upstreams the old proxy had that this one's Config does not list are
// kept as removed, with their connections.
func (p *Proxy) Adopt(ctx context.Context, uc *net.UnixConn) (*Adopted, error) {
	uc.SetWriteBuffer(2 * wireMaxMessage)
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*Adopted, error) {
		stop()
		uc.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("pinproxy: adopt: %w", context.Cause(ctx))
		}
		return nil, err
	}
	var hello wireHello
	if _, err := recvMsg(uc, msgHello, &hello); err != nil {
		return fail(fmt.Errorf("pinproxy: adopt: hello: %w", err))
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var lns []wireListener
	var conns []wireConn
	for len(lns) < hello.Listeners || len(conns) < hello.Conns {
		var b wireBatch
		got, err := recvMsg(uc, msgBatch, &b)
		fds = append(fds, got...)
		if err != nil {
			return fail(fmt.Errorf("pinproxy: adopt: after %d of %d connections: %w", len(conns), hello.Conns, err))
		}
		lns = append(lns, b.Listeners...)
		conns = append(conns, b.Conns...)
	}
	var end wireEnd
	if _, err := recvMsg(uc, msgEnd, &end); err != nil {
		return fail(fmt.Errorf("pinproxy: adopt: end: %w", err))
	}
	if end.Listeners != len(lns) || end.Conns != len(conns) || len(lns) != hello.Listeners || len(conns) != hello.Conns {
		return fail(fmt.Errorf("%w: got %d listeners and %d connections; hello said %d and %d, end %d and %d",
			errWire, len(lns), len(conns), hello.Listeners, hello.Conns, end.Listeners, end.Conns))
	}
	b, _ := encodeMsg(msgHave, struct{}{})
	if err := sendMsg(uc, b, nil); err != nil {
		return fail(fmt.Errorf("pinproxy: adopt: %w", err))
	}
	var commit struct{}
	if _, err := recvMsg(uc, msgCommit, &commit); err != nil {
		return fail(fmt.Errorf("pinproxy: adopt: the old process did not commit: %w", err))
	}
	stop()
	uc.SetDeadline(time.Time{})

	// Ours now. Nothing below may give up half-way: whatever cannot be
	// taken is closed and logged.
	a := &Adopted{OldPID: hello.PID}
	a.ready = func() error {
		defer uc.Close()
		b, _ := encodeMsg(msgReady, wireReady{PID: os.Getpid()})
		uc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		return sendMsg(uc, b, nil)
	}
	p.adoptCounters(hello)
	for i, wl := range lns {
		f := os.NewFile(uintptr(fds[i]), "listener "+wl.Addr)
		fds[i] = -1
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			p.log.LogAttrs(ctx, slog.LevelError, "adopt: cannot take a listener", slog.String("addr", wl.Addr), slog.Any("err", err))
			continue
		}
		if wl.Extra {
			a.Extra = append(a.Extra, ln)
			continue
		}
		if wl.Preset {
			p.mu.Lock()
			p.presetKA[ln] = struct{}{}
			p.mu.Unlock()
		}
		a.Listeners = append(a.Listeners, ln)
	}
	cfds := fds[len(lns):]
	for _, wc := range conns {
		client, err1 := p.fileConn(cfds[0], "client")
		up, err2 := p.fileConn(cfds[1], "upstream")
		cfds[0], cfds[1] = -1, -1
		cfds = cfds[2:]
		var pipes [2]*splicePipe
		for i, n := range wc.PipeBytes {
			if n > 0 {
				pipes[i] = newSplicePipe(cfds[0], -1, n) // closed by its cleanup once written out
				cfds[0] = -1
				cfds = cfds[1:]
			}
		}
		if err := errors.Join(err1, err2); err != nil {
			for _, c := range []net.Conn{client, up} {
				if c != nil {
					c.Close()
				}
			}
			p.log.LogAttrs(ctx, slog.LevelError, "adopt: cannot take a connection", slog.String("upstream", wc.Upstream), slog.Any("err", err))
			continue
		}
		p.adoptConn(wc, client, up, pipes)
		a.Conns++
		if wc.Parked {
			a.Parked++
		}
	}
	fds = nil
	p.log.LogAttrs(ctx, slog.LevelInfo, "upgrade: adopted",
		slog.Int("conns", a.Conns), slog.Int("parked", a.Parked), slog.Int("listeners", len(a.Listeners)+len(a.Extra)),
		slog.Int("from_pid", hello.PID))
	return a, nil
}

// adoptCounters adds the old proxy's counters to p's, and takes its
// upstreams' state.
func (p *Proxy) adoptCounters(h wireHello) {
	t := h.Totals
	p.accepted.Add(t.Accepted)
	p.rejected.Add(t.Rejected)
	p.unrouted.Add(t.Unrouted)
	p.localErrors.Add(t.LocalErrors)
	p.upg.ok.Add(t.Upgrades + 1)
	p.upg.failed.Add(t.UpgradesFailed)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moves += t.Moves
	fromNano := func(n int64) time.Time {
		if n == 0 {
			return time.Time{}
		}
		return time.Unix(0, n)
	}
	for _, w := range h.Upstreams {
		u := p.upstreamLocked(w.Addr)
		u.dials += w.Dials
		u.failures += w.Failures
		u.moved += w.Moved
		u.bytes.up.Add(w.BytesUp)
		u.bytes.down.Add(w.BytesDown)
		u.lastFailure, u.lastError = fromNano(w.LastFailure), w.LastError
		u.backoffUntil, u.upSince = fromNano(w.BackoffUntil), fromNano(w.UpSince)
		u.answered, u.lastFailed = w.Answered, w.LastFailed
		u.state, u.rise, u.fall = health(w.State), w.Rise, w.Fall
		if u.removed && w.Removed {
			u.removedAt = fromNano(w.RemovedAt)
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
	u := &upstream{addr: addr, removed: true, removedAt: time.Now()}
	p.leaving = append(p.leaving, u)
	slices.SortFunc(p.leaving, func(a, b *upstream) int { return strings.Compare(a.addr, b.addr) })
	return u
}

// adoptConn links a handed-over connection and starts its copy path:
// parked again if it was parked.
func (p *Proxy) adoptConn(wc wireConn, client, upc net.Conn, pipes [2]*splicePipe) {
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
			return
		}
	}
	p.park.add(l)
	if wc.Parked && l.pk != nil {
		l.state.Store(linkParking)
		if l.pk.park(l) {
			return
		}
		l.state.Store(linkActive)
	}
	go l.run()
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

// sendMsg sends one message with fds.
func sendMsg(uc *net.UnixConn, b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := uc.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return fmt.Errorf("pinproxy: hand-over: sending %c: %w", b[0], err)
	}
	if n != len(b) || oobn != len(oob) {
		return fmt.Errorf("pinproxy: hand-over: sending %c: short write", b[0])
	}
	return nil
}

// recvMsg receives one message of kind into v and returns the
// descriptors it carried (the caller closes them, even on error).
func recvMsg(uc *net.UnixConn, kind byte, v any) ([]int, error) {
	buf := make([]byte, wireMaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(253*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	var fds []int
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for i := range msgs {
				if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	switch {
	case err != nil:
		return fds, err
	case n == 0:
		return fds, fmt.Errorf("the other process closed the socket before %q", kind)
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > wireMaxMessage:
		return fds, fmt.Errorf("%w: %c: truncated", errWire, kind)
	}
	return fds, parseMsg(buf[:n], len(fds), kind, v)
}
