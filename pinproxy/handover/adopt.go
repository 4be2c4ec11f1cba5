package handover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Adoption is what the new process received. Its descriptors are the
// caller's from Adopt on: it closes each, whether it uses it or not.
type Adoption struct {
	OldPID    int
	State     json.RawMessage // the old process's own, as it sent it
	Listeners []Listener
	Conns     []Conn
	Batches   int // messages that carried descriptors

	peer *Peer
	done bool
	v1   bool // from an old process of version 1
}

// Adopt runs the new process's side of a hand-over on peer up to the
// point where it has everything: it asks, receives every listener and
// connection, checks the totals, and says it has them. Nothing received
// may be used before Ready: the old process still serves, and takes
// everything back if Ready does not end in its commit. If anything
// fails first, or ctx ends, Adopt closes what it received and peer, and
// returns an error.
func Adopt(ctx context.Context, peer *Peer) (a *Adoption, err error) {
	setBuffer(peer.conn)
	stop := context.AfterFunc(ctx, func() { peer.conn.SetDeadline(aLongTimeAgo) })
	defer stop()
	var fds []int
	defer func() {
		if err != nil {
			closeFDs(fds)
			peer.Close()
			if ctx.Err() != nil {
				err = fmt.Errorf("handover: adopt: %w (%w)", context.Cause(ctx), err)
			}
		}
	}()
	// The old process speaks first: its version, or, at version 1, its
	// hello.
	first, got, err := recvRaw(peer.conn)
	fds = append(fds, got...)
	if err != nil {
		return nil, fmt.Errorf("handover: adopt: waiting for the old process: %w", err)
	}
	a = &Adoption{peer: peer}
	var hello wireHello
	if len(first) > 0 && first[0] == msgHello {
		var h1 wireHelloV1
		if err := parseMsg(first, len(fds), msgHello, &h1); err != nil {
			return nil, fmt.Errorf("handover: adopt: hello: %w", err)
		}
		a.v1 = true
		hello = wireHello{Version: 1, PID: h1.PID, Listeners: h1.Listeners, Conns: h1.Conns, State: first[1:]}
	} else {
		if err := parseMsg(first, len(fds), msgVersion, &wireVersion{}); err != nil {
			return nil, fmt.Errorf("handover: adopt: %w", err)
		}
		b, _ := encodeMsg(msgRequest, wireRequest{Version: Version, PID: peer.env.getpid()})
		if err := sendMsg(peer.conn, b, nil); err != nil {
			return nil, err
		}
		if _, err := recvMsg(peer.conn, msgHello, &hello); err != nil {
			return nil, fmt.Errorf("handover: adopt: hello: %w", err)
		}
	}
	a.OldPID, a.State = hello.PID, hello.State
	var states []ConnState
	for len(a.Listeners) < hello.Listeners || len(states) < hello.Conns {
		var bt wireBatch
		var got []int
		var err error
		if a.v1 {
			var b1 wireBatchV1
			got, err = recvMsg(peer.conn, msgBatch, &b1)
			bt.Conns = b1.Conns
			for _, l := range b1.Listeners {
				name := "proxy"
				switch {
				case l.Extra:
					name = "extra"
				case l.Preset:
					name = "proxy+keepalive"
				}
				bt.Listeners = append(bt.Listeners, wireListener{Addr: l.Addr, Name: name})
			}
		} else {
			got, err = recvMsg(peer.conn, msgBatch, &bt)
		}
		fds = append(fds, got...)
		if err != nil {
			return nil, fmt.Errorf("handover: adopt: after %d of %d connections: %w", len(states), hello.Conns, err)
		}
		a.Batches++
		for _, l := range bt.Listeners {
			a.Listeners = append(a.Listeners, Listener{Addr: l.Addr, Name: l.Name})
		}
		states = append(states, bt.Conns...)
	}
	var end wireEnd
	if _, err := recvMsg(peer.conn, msgEnd, &end); err != nil {
		return nil, fmt.Errorf("handover: adopt: end: %w", err)
	}
	if end.Listeners != len(a.Listeners) || end.Conns != len(states) || len(a.Listeners) != hello.Listeners || len(states) != hello.Conns {
		return nil, fmt.Errorf("%w: got %d listeners and %d connections; hello said %d and %d, end %d and %d",
			errWire, len(a.Listeners), len(states), hello.Listeners, hello.Conns, end.Listeners, end.Conns)
	}
	b, _ := encodeMsg(msgHave, struct{}{})
	if err := sendMsg(peer.conn, b, nil); err != nil {
		return nil, fmt.Errorf("handover: adopt: %w", err)
	}
	// The descriptors came listeners first, then each connection's.
	rest := fds
	for i := range a.Listeners {
		a.Listeners[i].FD = rest[0]
		rest = rest[1:]
	}
	for _, st := range states {
		c := Conn{Client: rest[0], Upstream: rest[1], Pipes: [2]int{-1, -1}, State: st}
		rest = rest[2:]
		for i, n := range st.PipeBytes {
			if n > 0 {
				c.Pipes[i] = rest[0]
				rest = rest[1:]
			}
		}
		a.Conns = append(a.Conns, c)
	}
	fds = nil
	return a, nil
}

// ErrNotCommitted is wrapped by Ready's error when the old process did
// not commit: it serves on with everything.
var ErrNotCommitted = errors.New("handover: the old process did not commit")

// Ready tells the old process this one has started everything but the
// copying and accepting, and waits for its commit (until ctx ends). Then
// it says this process serves and, once that has reached the old
// process, calls start, which begins to copy and accept: from there on
// everything is this process's. It does the same if the old process
// died after its commit. If the commit does not come (the old process
// gave up, as it does when this one is not ready within its timeout, or
// went away), or the old process stopped waiting for "serving", Ready
// returns an error wrapping ErrNotCommitted without calling start: the
// old process has everything, and this one must close what it adopted,
// untouched, and serve nothing. Ready closes the socket to the old
// process.
func (a *Adoption) Ready(ctx context.Context, start func()) error {
	if a.done {
		return errors.New("handover: Ready called twice")
	}
	a.done = true
	uc := a.peer.conn
	defer a.peer.Close()
	uc.SetDeadline(time.Time{}) // Adopt's ctx may have cut it short since
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(aLongTimeAgo) })
	defer stop()
	fail := func(step string, err error) error {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return fmt.Errorf("%w: %s: %w", ErrNotCommitted, step, err)
	}
	b, _ := encodeMsg(msgReady, wirePID{PID: a.peer.env.getpid()})
	if a.v1 {
		// A version 1 old process commits at once and lets everything
		// go: from its commit on, this process must serve.
		if _, err := recvMsg(uc, msgCommit, &struct{}{}); err != nil {
			return fail("waiting for the commit", err)
		}
		start()
		uc.SetWriteDeadline(time.Now().Add(DefaultStall))
		sendMsg(uc, b, nil) // it waits for this before it exits
		return nil
	}
	if err := sendMsg(uc, b, nil); err != nil {
		return fail("reporting ready", err)
	}
	if _, err := recvMsg(uc, msgCommit, &struct{}{}); err != nil {
		return fail("waiting for the commit", err)
	}
	uc.SetWriteDeadline(time.Now().Add(DefaultStall))
	b, _ = encodeMsg(msgServing, struct{}{})
	if err := sendMsg(uc, b, nil); err != nil {
		// The old process stopped waiting and said so (it serves on),
		// or died after its commit (the socket closed without a word):
		// then everything is this process's, and nobody else serves it.
		if _, _, rerr := recvRaw(uc); !errors.Is(rerr, errClosed) {
			return fail("saying it serves", err)
		}
	}
	start()
	return nil
}

// Abort gives up the hand-over before Ready: the old process takes
// everything back. The caller closes what it adopted first.
func (a *Adoption) Abort() {
	a.done = true
	a.peer.Close()
}
