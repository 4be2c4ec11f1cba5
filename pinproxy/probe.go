package pinproxy

import (
	"context"
	"time"
)

// This file keeps an upstream's test-connects (health checks', rebalance
// rounds', drains') one at a time, apart, and away from a moved client's
// redial. A node with one inbound slot left takes one session and refuses
// the next: two test-connects at it at once, or one just after another
// whose session the node has not yet let go of, would each refuse the
// other, and a check while a moved client's redial is on its way would
// take the slot the redial needs (btcd with --maxpeers one above its
// peers, checks every second and rounds every two: the checks' sessions
// and the rounds' met at the slot for as long as a minute).
//
// So a health check leaves out an upstream whose test-connect is under
// way, one whose last ended less than probeGap ago, and one a rebalance
// move's redial is due at (for at most FailedBackoff: redialDueLocked).
// A round waits for a test-connect under way and takes its outcome when
// it says enough (a session held, if the round would hold its own); a
// drain waits for it too. Either starts its own no sooner than probeGap
// after the last ended, and moves a connection no sooner than probeGap
// after the test-connect that answered for it.

// probeState is an upstream's test-connects. Guarded by Proxy.mu.
type probeState struct {
	busy  bool          // one is under way
	done  chan struct{} // closed when it ends
	ended time.Time     // real time the last one ended
	last  tested        // and its outcome
}

// probeGap is the least time between the end of a test-connect to an
// upstream and the start of the next: time for a node to let go of the
// last one's session (btcd frees a peer's slot a moment after its
// connection closes). It is at most a quarter of the checks' and the
// rounds' intervals.
func (p *Proxy) probeGap() time.Duration {
	gap := 100 * time.Millisecond
	if i := p.cfg.CheckInterval; i > 0 {
		gap = min(gap, i/4)
	}
	if i := p.cfg.RebalanceInterval; i > 0 {
		gap = min(gap, i/4)
	}
	return gap
}

// startProbeLocked marks a test-connect to u under way.
func (u *upstream) startProbeLocked() {
	u.probe.busy = true
	u.probe.done = make(chan struct{})
}

// endProbeLocked records the end of u's test-connect, and t, its outcome.
func (u *upstream) endProbeLocked(t tested) {
	close(u.probe.done)
	u.probe = probeState{ended: time.Now(), last: t}
}

// checkProbeLocked reports whether a health check may test-connect u now,
// and if so marks it under way: not while another test-connect is, nor
// within probeGap of the last, nor while a rebalance move's redial is
// due at u (redialDueLocked: a client that never redials does not stop
// the checks for good).
func (p *Proxy) checkProbeLocked(u *upstream) bool {
	if u.probe.busy || time.Since(u.probe.ended) < p.probeGap() || p.redialDueLocked(u) {
		return false
	}
	u.startProbeLocked()
	return true
}

// redialDueLocked reports whether a move's redial is due at u: a round
// or a drain sent one there, and it has not come. One that has not come
// within FailedBackoff of the last move (DefaultFailedBackoff when that
// is not positive) is not coming, its client gone: it is forgotten, so
// that the checks go on and a later client's session is not taken for a
// moved connection's.
func (p *Proxy) redialDueLocked(u *upstream) bool {
	s := &u.sessions
	wait := p.cfg.FailedBackoff
	if wait <= 0 {
		wait = DefaultFailedBackoff
	}
	if s.moving > 0 && time.Since(s.movedAt) >= wait {
		s.moving = 0
	}
	return s.moving > 0
}

// moveLocked ends c, the newest connection of its upstream, for a move
// to u (a round's or a drain's, why): its client's redial is expected at
// u as the move's successor (session.go), and the checks leave u out
// until it comes (redialDueLocked). The caller closes c without p.mu.
func (p *Proxy) moveLocked(c *conn, u *upstream, why endReason) {
	u.sessions.moving++
	u.sessions.movedAt = time.Now()
	c.up.moved++
	p.moves++
	p.unlinkLocked(c)
	p.endLocked(c, why)
}

// probeSinceLocked returns the outcome of a test-connect to u that ended
// after since, if it says enough for a round or a drain that began then:
// a refusal, or an answer with the session held when hold asks for that.
func (u *upstream) probeSinceLocked(since time.Time, hold bool) (tested, bool) {
	pr := &u.probe
	if pr.busy || !pr.ended.After(since) {
		return tested{}, false
	}
	switch t := pr.last; {
	case t.out == refused, t.out == answered && (t.held || !hold):
		return t, true
	}
	return tested{}, false
}

// awaitProbeLocked waits, without p.mu, until a round or a drain may
// test-connect u or move a connection to it: until the test-connect under
// way ends and probeGap after the last one has passed. It returns with
// p.mu held, and waited false if it did not wait (nothing it looked at
// changed); it fails only when ctx ends.
func (p *Proxy) awaitProbeLocked(ctx context.Context, u *upstream) (waited bool, err error) {
	for {
		var done <-chan struct{} // the busy test-connect's end
		var gap <-chan time.Time // probeGap after the last one's
		stop := func() bool { return false }
		if u.probe.busy {
			done = u.probe.done
		} else if left := p.probeGap() - time.Since(u.probe.ended); left > 0 {
			t := time.NewTimer(left)
			gap, stop = t.C, t.Stop
		} else {
			return waited, nil
		}
		p.mu.Unlock()
		waited = true
		select {
		case <-done:
		case <-gap:
		case <-ctx.Done():
			err = ctx.Err()
		}
		stop()
		p.mu.Lock()
		if err != nil {
			return true, err
		}
	}
}
