package handover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// DefaultStall is Config.Stall's default.
const DefaultStall = 2 * time.Second

// Config bounds a hand-over. The zero Config has the defaults.
type Config struct {
	// Stall is how long the other process may take over a step that is
	// this package's own work: to send its request once connected, to
	// take each message, to say it has everything, and to say it serves
	// once committed. A peer that connects and says nothing is dropped
	// after it, before anything is paused. Zero means DefaultStall.
	Stall time.Duration
}

func (c Config) stall() time.Duration {
	if c.Stall > 0 {
		return c.Stall
	}
	return DefaultStall
}

// Offer is what the old process hands over. Its descriptors stay the
// caller's: Handoff sends copies and closes none.
type Offer struct {
	// State is the caller's own (counters, say), passed through as it
	// is; at most 128 KiB.
	State     json.RawMessage
	Listeners []Listener
	Conns     []Conn
}

// Listener is a listening socket handed over.
type Listener struct {
	FD   int
	Addr string // its local address, for errors and logs
	Name string // the caller's label for it
}

// Conn is one connection handed over: the seam between a data path and
// the hand-over. Its two sockets, the read end of each pipe that holds
// bytes on their way (-1: none; State.PipeBytes says how many), and its
// state: counters, half-closes, and the bytes read and not yet written.
type Conn struct {
	Client, Upstream int
	Pipes            [2]int
	State            ConnState
}

// Report says how far a hand-over went.
type Report struct {
	NewPID int // as the new process said in its request
	// Ready: the new process said it had started everything but the
	// copying and accepting.
	Ready bool
	// Serving: the new process said it serves. The offer is the new
	// process's: the caller drops its copies (closing a descriptor
	// another process holds sends nothing to the peer) and touches
	// nothing more.
	Serving bool
	Batches int // messages that carried descriptors
}

// ErrStalled is wrapped by the error for a peer that did not take a step
// within Config.Stall.
var ErrStalled = errors.New("handover: the other process stalled")

// Handoff runs the old process's side of a hand-over on peer. It waits
// for the peer's request (Config.Stall at most), then calls prepare,
// which stops everything it offers (nothing is read from or written to
// those sockets until Handoff returns) and describes it; it sends the
// offer, waits for the new process to have it all and to be ready (ctx
// bounds that wait), commits, and waits for it to serve.
//
// It returns a Report with Serving true once the new process serves; the
// caller then drops its copies. Otherwise it returns an error, and the
// new process holds nothing it may use: it never got the commit, or its
// "serving" could not reach this process (the socket is shut for reading
// first, so a later one fails), and a new process never touches a
// descriptor before its "serving" is sent. The caller takes everything
// back. A peer that did not take over is killed: a child, or a process
// that connected to a Socket. Handoff closes peer.
func Handoff(ctx context.Context, peer *Peer, cfg Config, prepare func(context.Context) (*Offer, error)) (rep Report, err error) {
	h := &handing{peer: peer, stall: cfg.stall(), ctx: ctx, msgs: make(chan inMsg, 1), quit: make(chan struct{})}
	setBuffer(peer.conn)
	go h.read()
	defer func() {
		close(h.quit)
		peer.Close()
		if !rep.Serving && peer.proc != nil {
			peer.proc.Kill()
			<-peer.proc.Exited()
		}
	}()

	b, _ := encodeMsg(msgVersion, wireVersion{Version: Version, PID: peer.env.getpid()})
	if err := h.write(b, nil); err != nil {
		return rep, err
	}
	var req wireRequest
	if err := h.next(msgRequest, &req, h.stall, "send its request"); err != nil {
		return rep, err
	}
	rep.NewPID = req.PID
	offer, err := prepare(ctx)
	if err != nil {
		return rep, err
	}
	if rep.Batches, err = h.send(offer); err != nil {
		return rep, err
	}
	if err := h.next(msgHave, &struct{}{}, h.stall, "say it has everything"); err != nil {
		return rep, err
	}
	if err := h.next(msgReady, &wirePID{}, 0, "report ready"); err != nil {
		return rep, err
	}
	rep.Ready = true
	b, _ = encodeMsg(msgCommit, struct{}{})
	if err := h.write(b, nil); err != nil {
		return rep, err // not sent: the new process will not serve
	}
	err = h.next(msgServing, &struct{}{}, h.stall, "say it serves")
	if err == nil {
		rep.Serving = true
		return rep, nil
	}
	// Settle it: shut the socket for reading, so that a "serving" not
	// sent yet fails in the new process, say so (the new process then
	// touches nothing), and read what was sent before.
	// "Taken back" goes whatever ctx says: without it, the new process
	// would take the socket closing for this one's death, and serve.
	peer.conn.CloseRead()
	b, _ = encodeMsg(msgTaken, struct{}{})
	peer.conn.SetWriteDeadline(time.Now().Add(h.stall))
	sendMsg(peer.conn, b, nil)
	for m := range h.msgs {
		if m.err != nil {
			break
		}
		if parseMsg(m.b, len(m.fds), msgServing, &struct{}{}) == nil {
			rep.Serving = true
			return rep, nil // it serves after all, late
		}
	}
	return rep, err
}

// handing is one Handoff's state, owned by its goroutine; read feeds it
// the peer's messages.
type handing struct {
	peer  *Peer
	stall time.Duration
	ctx   context.Context
	msgs  chan inMsg // closed after an error
	quit  chan struct{}
}

type inMsg struct {
	b   []byte
	fds []int
	err error
}

// read reads the peer's messages until the socket fails or ends.
func (h *handing) read() {
	defer close(h.msgs)
	for {
		b, fds, err := recvRaw(h.peer.conn)
		if len(fds) > 0 { // the new process sends none
			closeFDs(fds)
			fds = fds[:0:0]
		}
		select {
		case h.msgs <- inMsg{b, fds, err}:
		case <-h.quit:
			return
		}
		if err != nil {
			return
		}
	}
}

// next waits, d at most (0: until ctx ends), for the peer's message of
// kind, into v; what says what the peer was to do.
func (h *handing) next(kind byte, v any, d time.Duration, what string) error {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case m, ok := <-h.msgs:
		if !ok {
			return fmt.Errorf("handover: waiting for the new process to %s: %w", what, errClosed)
		}
		if m.err != nil {
			return fmt.Errorf("handover: waiting for the new process to %s: %w", what, h.why(m.err))
		}
		return parseMsg(m.b, len(m.fds), kind, v)
	case <-h.peer.exited():
		return fmt.Errorf("handover: the new process (pid %d) exited: %v", h.peer.proc.Pid(), h.peer.proc.Err())
	case <-timeout:
		return fmt.Errorf("%w: it did not %s within %v", ErrStalled, what, d)
	case <-h.ctx.Done():
		return fmt.Errorf("handover: waiting for the new process to %s: %w", what, context.Cause(h.ctx))
	}
}

// why says why reading failed: a child that exited says how.
func (h *handing) why(err error) error {
	if h.peer.proc == nil {
		return err
	}
	select {
	case <-h.peer.proc.Exited():
		return fmt.Errorf("%w (the new process, pid %d, exited: %v)", err, h.peer.proc.Pid(), h.peer.proc.Err())
	case <-time.After(100 * time.Millisecond):
		return err
	}
}

// write sends one message, within Stall and ctx's deadline. (A message
// is sent whole or not at all.)
func (h *handing) write(b []byte, fds []int) error {
	if err := h.ctx.Err(); err != nil {
		return fmt.Errorf("handover: %w", context.Cause(h.ctx))
	}
	d := time.Now().Add(h.stall)
	if cd, ok := h.ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	h.peer.conn.SetWriteDeadline(d)
	err := sendMsg(h.peer.conn, b, fds)
	switch {
	case err == nil:
		return nil
	case h.ctx.Err() != nil:
		return fmt.Errorf("handover: %w", context.Cause(h.ctx))
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: it did not take a message within %v", ErrStalled, h.stall)
	}
	return h.why(err)
}

// send sends the offer: hello, batches cut to the bounds, end. It
// returns the number of batches.
func (h *handing) send(o *Offer) (int, error) {
	hello := wireHello{Version: Version, PID: h.peer.env.getpid(), Listeners: len(o.Listeners), Conns: len(o.Conns), State: o.State}
	if len(o.State) > maxState {
		return 0, fmt.Errorf("handover: %d bytes of state, at most %d", len(o.State), maxState)
	}
	b, err := encodeMsg(msgHello, hello)
	if err != nil {
		return 0, err
	}
	if err := h.write(b, nil); err != nil {
		return 0, err
	}
	var batch wireBatch
	var fds []int
	size, n := 0, 0
	flush := func() error {
		b, err := encodeMsg(msgBatch, batch)
		if err != nil {
			return err
		}
		if err := h.write(b, fds); err != nil {
			return err
		}
		batch, fds, size = wireBatch{}, nil, 0
		n++
		return nil
	}
	for _, l := range o.Listeners {
		if len(fds) == maxFDs {
			if err := flush(); err != nil {
				return n, err
			}
		}
		batch.Listeners = append(batch.Listeners, wireListener{Addr: l.Addr, Name: l.Name})
		fds = append(fds, l.FD)
	}
	for _, c := range o.Conns {
		if err := c.State.check(); err != nil {
			return n, fmt.Errorf("handover: connection to %s: %w", c.State.Upstream, err)
		}
		cfds := []int{c.Client, c.Upstream}
		for i, p := range c.Pipes {
			if c.State.PipeBytes[i] > 0 {
				cfds = append(cfds, p)
			}
		}
		m := 200 + 4*(len(c.State.Pending[0])+len(c.State.Pending[1]))/3
		if len(fds)+len(cfds) > maxFDs || size+m > maxMessage*3/4 {
			if err := flush(); err != nil {
				return n, err
			}
		}
		batch.Conns = append(batch.Conns, c.State)
		fds = append(fds, cfds...)
		size += m
	}
	if len(fds) > 0 {
		if err := flush(); err != nil {
			return n, err
		}
	}
	b, _ = encodeMsg(msgEnd, wireEnd{Listeners: len(o.Listeners), Conns: len(o.Conns)})
	return n, h.write(b, nil)
}

// aLongTimeAgo is a deadline in the past: it fails a read or write at once.
var aLongTimeAgo = time.Unix(1, 0)
