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

// probeWaitLocked returns nil if a round or a drain may test-connect u
// now; else a wait, to run without p.mu, for the test-connect under way
// to end or for probeGap after the last to pass. The wait fails only when
// ctx ends.
func (p *Proxy) probeWaitLocked(u *upstream) func(ctx context.Context) error {
	if pr := u.probe; pr.busy {
		return func(ctx context.Context) error {
			select {
			case <-pr.done:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	left := p.probeGap() - time.Since(u.probe.ended)
	if left <= 0 {
		return nil
	}
	return func(ctx context.Context) error {
		t := time.NewTimer(left)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
