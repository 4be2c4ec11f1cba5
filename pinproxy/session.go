package pinproxy

import (
	"fmt"
	"log/slog"
	"time"
)

// This file tells an upstream that accepts connections and then refuses
// the sessions (a node that banned the proxy's address, one whose inbound
// slots are full, one still starting) from one that answers, by how the
// sessions end (Config.RefusedWithin). A TCP connect says only that the
// upstream's kernel answered; a session held says the daemon did.
//
// A session is refused when the upstream ends it first (its stream ended
// before the client's: a FIN or a reset from the upstream) within
// RefusedWithin of the dial, having sent at most RefusedBytes; it is held
// when it lives past RefusedWithin. A client that hangs up first never
// counts against the upstream, however soon. Sessions are watched at
// their end (sessionEndedLocked, for every connection) and, while an
// upstream is under suspicion, at RefusedWithin after the dial, by a
// timer (so that a session that holds counts before it ends, which for
// a long-lived connection may be days). Test-connects to an upstream that
// refused recently hold their connection for RefusedWithin to the same
// end (testConnect, health.go).
//
// Session lifetimes are measured on the real clock (time.Now), as socket
// deadlines are; decisions (back-off) are taken on the proxy's clock.

// sessionState is what the proxy knows of an upstream's sessions.
// Guarded by Proxy.mu.
type sessionState struct {
	refused     int64         // sessions it refused, in all
	streak      int           // sessions refused in a row, none held since the first
	longest     time.Duration // the longest-lived of those, for the reason
	lastRefused time.Time     // real time of the last refusal: a session held counts only if dialed after it
	// refusing is non-empty while the upstream refuses sessions: the
	// reason ("refusing sessions: 3 ended within 2ms"). until is the end
	// of its back-off, on the proxy's clock.
	refusing string
	until    time.Time
	trials   int // sessions to it on trial: dialed under suspicion, neither held nor ended yet
	// moving counts rebalance moves to it whose redial has not come yet;
	// the next session dialed to it is taken for the moved connection's
	// successor; movedAt is the real time of the last move. stopped: a successor was refused; no move goes to it
	// until a client's session holds there, or, once stoppedUntil (the
	// failed move plus Config.FailedBackoff, on the proxy's clock) has
	// passed, a test-connect's. probation: it answered again after
	// refusing, on a test-connect's word only; rounds move one connection
	// to it at a time, each once the last one's successor has shown,
	// until a client's session holds there.
	moving       int
	movedAt      time.Time
	stopped      bool
	stoppedUntil time.Time
	probation    bool
}

// backingOff reports whether an upstream refusing sessions counts as
// just failed: during its back-off, and after it while a session to it
// is on trial (one client tries it; the others do not wait on it too).
func (s *sessionState) backingOff(now time.Time) bool {
	return s.refusing != "" && (now.Before(s.until) || s.trials > 0)
}

// refusedRecently reports whether the upstream refused a session (or a
// move to it failed) and has held none since: "answers" then takes a
// session held, not a connect.
func (s *sessionState) refusedRecently() bool {
	return s.streak > 0 || s.refusing != "" || s.stopped
}

// holdTestLocked reports whether a test-connect to u holds its session
// for RefusedWithin, answering only if u does not end it: when u refused
// a session and has held none since, and also when it refused one within
// FailedBackoff, held ones or not. A node with one inbound slot left
// holds one session and refuses the next: a test-connect that only
// connects (or runs an exchange the node answers before it checks its
// slots, as btcd does) would send it a move it refuses. Health checks
// hold only while it refused and held none since: a check every
// interval, each holding for RefusedWithin, would itself take the slot
// a move needs.
func (p *Proxy) holdTestLocked(u *upstream) bool {
	s := &u.sessions
	return s.refusedRecently() || !s.lastRefused.IsZero() && time.Since(s.lastRefused) < p.cfg.FailedBackoff
}

// suspect reports whether a session dialed to the upstream now goes on
// trial, to be found held at RefusedWithin.
func (s *sessionState) suspect() bool {
	return s.refusedRecently() || s.moving > 0 || s.probation
}

// noMove reports whether a rebalance round must not move a connection to
// the upstream at now: a move to it failed within its back-off and no
// client's session held since, or it is on probation with a move's
// successor still to show. After the back-off a round may test-connect
// it again, holding the session (refusedRecently): held, it is on
// probation; refused, the stop starts again.
func (s *sessionState) noMove(now time.Time) bool {
	return s.stopped && now.Before(s.stoppedUntil) || s.probation && (s.moving > 0 || s.trials > 0)
}

// restarted forgets what u's sessions said of it: the upstream refused
// connects and accepts them again, so it is another process, whose
// sessions are to be judged afresh (a node restarted clean keeps no ban).
func (s *sessionState) restarted() {
	*s = sessionState{refused: s.refused, lastRefused: s.lastRefused, trials: s.trials, moving: s.moving, movedAt: s.movedAt}
}

// dialedLocked starts watching c's session; connect calls it once c is
// linked. The first session dialed after a move is the move's successor,
// watched or not. A session dialed under suspicion goes on trial: a timer
// finds it held at RefusedWithin unless it ended first.
func (p *Proxy) dialedLocked(c *conn) {
	s := &c.up.sessions
	if p.redialDueLocked(c.up) { // even unwatched: the health checks wait for it (probe.go)
		s.moving--
		c.successor = true
	}
	if p.cfg.RefusedWithin < 0 {
		return
	}
	c.dialed = time.Now()
	if !s.suspect() && !c.successor {
		return
	}
	s.trials++
	c.trial = time.AfterFunc(p.cfg.RefusedWithin, func() { p.trialOver(c) })
}

// trialOver runs RefusedWithin after c's dial: if c is still linked to its
// upstream, and the upstream has not ended its stream (the client may
// hold its end after that), the upstream held the session.
func (p *Proxy) trialOver(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.trial == nil { // it ended first
		return
	}
	c.trial = nil
	c.up.sessions.trials--
	if !c.linked {
		return
	}
	if c.link != nil {
		if first, at := c.link.firstEnded(); first == sideUpstream && at.Sub(c.dialed) < p.cfg.RefusedWithin {
			return // sessionEndedLocked judges it when the client lets go
		}
	}
	p.heldLocked(c.up, c.dialed, true)
}

// sessionEndedLocked is told of every connection that ended: how long
// after its dial (c.dialed; zero for one adopted in an upgrade, which
// counts for nothing), the bytes each way and who ended first (r), and
// whether the proxy closed it itself (c.reason). Every data path calls it
// through finish. Call with p.mu held.
func (p *Proxy) sessionEndedLocked(c *conn, r spliceResult) {
	if c.dialed.IsZero() {
		return
	}
	s := &c.up.sessions
	if c.trial != nil {
		c.trial.Stop()
		c.trial = nil
		s.trials--
	}
	life := time.Since(c.dialed)
	if r.first == sideUpstream && r.err != nil && !r.firstAt.IsZero() {
		// The upstream closed the connection, not just its stream: the
		// client's bytes after its end drew a reset. What counts is when
		// it ended, however long the client lingered before it wrote.
		// (After a clean half-close the session lasts until its end: the
		// upstream may still be reading.)
		life = r.firstAt.Sub(c.dialed)
	}
	switch {
	case c.reason != endClosed: // the proxy closed it (a move, a drain, a forced shutdown): it tells nothing
	case life >= p.cfg.RefusedWithin:
		p.heldLocked(c.up, c.dialed, true)
	case r.first == sideUpstream && r.down <= p.cfg.RefusedBytes:
		p.refusedLocked(c.up, life, c.successor, true)
	}
}

// refusedLocked records a session u refused after life: a client's
// (client), or a test-connect's, which records its failure itself.
// successor: the session was a moved connection's redial, a failed move,
// which makes u refusing sessions at once: it refused right after it
// answered the round's test-connect.
func (p *Proxy) refusedLocked(u *upstream, life time.Duration, successor, client bool) {
	s := &u.sessions
	s.refused++
	s.streak++
	s.longest = max(s.longest, life)
	s.lastRefused = time.Now()
	if successor {
		s.stopped = true
		s.stoppedUntil = p.clock().Add(p.cfg.FailedBackoff)
		p.failedMoves++
		p.log.LogAttrs(p.stopCtx, slog.LevelWarn, "rebalance: the moved connection's redial was refused; no moves to it until it holds a session",
			slog.String("upstream", u.addr), slog.Duration("lasted", roundForLog(life)))
	}
	if s.streak < p.cfg.RefusedSessions && !successor {
		return
	}
	now := p.clock()
	reason := fmt.Sprintf("refusing sessions: %d ended within %v", s.streak, roundForLog(s.longest))
	first := s.refusing == ""
	s.refusing = reason
	if p.cfg.FailedBackoff > 0 {
		s.until = now.Add(p.cfg.FailedBackoff)
	}
	if client { // as a failed dial
		u.failures++
		u.lastFailure = now
		u.lastError = reason
		u.answered = false
	}
	if first {
		p.log.LogAttrs(p.stopCtx, slog.LevelWarn, "upstream refuses sessions; trying it last",
			slog.String("upstream", u.addr), slog.String("reason", reason))
	}
}

// heldLocked records a session to u, dialed at dialed, that lived past
// RefusedWithin: a client's (client; a moved connection's successor among
// them: that move is done) or a test-connect's. A session dialed before
// u's last refusal says nothing of u now. A test-connect's session held
// puts an upstream that refused recently on probation; only a client's
// lifts that, and a failed move's stop.
func (p *Proxy) heldLocked(u *upstream, dialed time.Time, client bool) {
	s := &u.sessions
	if dialed.Before(s.lastRefused) {
		return
	}
	if client {
		s.stopped, s.probation = false, false
	} else if s.refusedRecently() {
		s.probation = true
		if !p.clock().Before(s.stoppedUntil) {
			s.stopped = false
		}
	}
	s.streak, s.longest = 0, 0
	if s.refusing == "" {
		return
	}
	s.refusing, s.until = "", time.Time{}
	u.recovered = true // a rebalance move to it now says "answers again"
	p.log.LogAttrs(p.stopCtx, slog.LevelInfo, "upstream holds sessions again",
		slog.String("upstream", u.addr))
}

// shownState is u's state as Stats, the metrics and Ready show it: down
// while it refuses sessions, whatever connects and checks say.
func (u *upstream) shownState() health {
	if u.sessions.refusing != "" {
		return healthDown
	}
	return u.state
}
