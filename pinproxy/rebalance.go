package pinproxy

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// localTestConnect is logged when a round's test-connect (or a drain's)
// fails for want of local resources.
const localTestConnect = "rebalance: cannot test-connect for want of local resources; nothing moved"

// Rebalance runs one rebalance round, the same one the proxy runs every
// Config.RebalanceInterval while it serves:
//
//   - If the busiest upstream holds fewer than two connections more than
//     the least-loaded one, it returns at once, having made no connection.
//   - Otherwise it test-connects, within Config.DialTimeout, to the idle
//     upstream a redial would go to: among those holding at least two
//     connections fewer than the busiest, the first in least-used order
//     (one that did not just fail before one that did, then fewest
//     connections, then, among those that just failed, the one that
//     failed longest ago, then the one listed first). If that fails, the
//     upstream counts as just failed and nothing is closed; the next
//     round tries the next idle upstream that just failed, if any.
//   - If it answers, the test connection is closed at once, and so is the
//     newest connection of the busiest upstream (ties: the one listed
//     first), both its client and upstream sides. The client is expected
//     to redial; least-used order then sends it to the idle upstream.
//
// The test-connect runs the check's exchange when Config.CheckExpect is
// set. An idle upstream that refused a session and has held none since
// (Config.RefusedWithin), or refused one within Config.FailedBackoff,
// answers only if it holds the test-connect's session: the connection is kept open until RefusedWithin after the
// dial, and fails if the upstream ends it first. A connection moved to an
// upstream whose next session, the moved client's redial, is refused is
// a failed move: the upstream is refusing sessions at once, and no round
// moves a connection to it again until a client's session holds there,
// or, after Config.FailedBackoff, a test-connect's session does.
// An upstream that answered again on a test-connect's word only takes
// one move at a time, each once the last one's redial has shown, until
// a client's session holds there.
//
// With Config.DrainRemoved, a round first moves one connection off an
// upstream that SetUpstreams removed at least that long ago, if the
// upstream its redial would go to answers a test-connect. That counts as
// one of the round's moves to that upstream: the round does not
// test-connect it again, nor move a connection there that the redial
// evens out.
//
// A health check's test-connect to the idle upstream under way when the
// round comes to it is waited for, and its answer taken for the round's
// if it says as much (a session held where the round would hold one);
// else the round test-connects no sooner than 100 ms after the check's
// ended (see Config.CheckInterval), so that a node with one slot left
// never sees the two at once. A connection is moved no sooner than
// 100 ms after the test-connect that answered for it ended, so that the
// moved client, if it redials at once, does not find the node still
// holding the test-connect's session.
//
// At most Config.RebalanceMaxMoves connections (default one) are closed
// per round, each only once its idle upstream answered a test-connect in
// that round, and never more than evens out the spread: each move counts
// as a connection already on the idle upstream. Rounds do not overlap.
// Every outcome is logged. Deciding to close nothing is not an error:
// Rebalance returns an error only when ctx ends during the test-connect,
// or ErrProxyClosed after Shutdown.
func (p *Proxy) Rebalance(ctx context.Context) error {
	p.rebalanceMu.Lock()
	defer p.rebalanceMu.Unlock()
	drainedTo := p.drainRemoved(ctx)

	type move struct {
		c        *conn
		from, to string
		wasDown  bool // the idle upstream came back from down (upstream.recovered)
	}
	var moves []move
	defer func() { // closed and logged without p.mu held
		for _, m := range moves {
			p.closeConn(m.c)
			msg := "spread uneven; moving a connection"
			if m.wasDown {
				msg = "answers again; moving a connection"
			}
			p.log.LogAttrs(ctx, slog.LevelInfo, msg, slog.String("from", m.from), slog.String("to", m.to))
		}
	}()
	roundStart := time.Now()
	planned := make(map[*upstream]int)    // redials each move sends to its idle upstream
	answering := make(map[*upstream]bool) // idle upstreams that answered this round
	tested := false                       // the round's own test-connect (or a check's) answered
	if drainedTo != nil {                 // the drain's redial is on its way there, on its test-connect's word
		planned[drainedTo]++
		answering[drainedTo] = true
	}

	p.mu.Lock()
	for len(moves) < p.cfg.RebalanceMaxMoves {
		if p.closed {
			p.mu.Unlock()
			return ErrProxyClosed
		}
		busy, idle := p.spreadLocked(p.clock(), planned)
		if idle == nil { // even: what an outage left uneven is mended
			for _, u := range p.upstreams {
				u.recovered = false
			}
		}
		if idle == nil || answering[idle] && busy.tail == nil {
			most := busy.load()
			p.mu.Unlock()
			switch {
			case len(moves) > 0:
			case tested:
				p.log.LogAttrs(ctx, slog.LevelDebug, "rebalance: spread evened out during the test-connect; nothing moved",
					slog.String("to", busy.addr))
			default:
				p.log.LogAttrs(ctx, slog.LevelDebug, "rebalance: spread is even; nothing to do",
					slog.Int("most", most))
			}
			return nil
		}
		if answering[idle] && idle.sessions.refusedRecently() { // a client's session to it was refused meanwhile
			p.mu.Unlock()
			p.log.LogAttrs(ctx, slog.LevelInfo, "idle node still refuses sessions; nothing moved",
				slog.String("from", busy.addr), slog.String("to", idle.addr), slog.String("err", idle.sessions.refusing))
			return nil
		}
		if answering[idle] {
			// The test-connect's session just ended: the node may not
			// have let go of it yet, and the moved client may redial at
			// once (probe.go).
			if waited, err := p.awaitProbeLocked(ctx, idle); err != nil {
				p.mu.Unlock()
				return fmt.Errorf("pinproxy: rebalance: move to %s: %w", idle.addr, err)
			} else if waited {
				continue // things may have changed meanwhile: look again
			}
			c := busy.tail
			p.moveLocked(c, idle, endRebalanced)
			planned[idle]++
			moves = append(moves, move{c, busy.addr, idle.addr, idle.recovered})
			continue
		}
		hold := p.holdTestLocked(idle)
		t, checked := idle.probeSinceLocked(roundStart, hold) // a health check's, while the round waited
		if !checked {
			if waited, err := p.awaitProbeLocked(ctx, idle); err != nil {
				p.mu.Unlock()
				return fmt.Errorf("pinproxy: rebalance: test-connect to %s: %w", idle.addr, err)
			} else if waited {
				continue // things may have changed meanwhile: look again
			}
			idle.startProbeLocked()
			idle.dials++
			p.mu.Unlock()
			t = p.testConnect(ctx, idle, p.cfg.DialTimeout, hold, localTestConnect, slog.String("to", idle.addr))
			p.mu.Lock()
			idle.endProbeLocked(t)
			if t.out == answered || t.out == refused {
				p.testedLocked(idle, t, false)
			}
		}
		switch t.out {
		case gaveUp:
			p.mu.Unlock()
			return fmt.Errorf("pinproxy: rebalance: test-connect to %s: %w", idle.addr, ctx.Err())
		case noResources:
			p.mu.Unlock()
			return nil
		case refused:
			p.mu.Unlock()
			msg := "idle node still does not answer; nothing moved"
			if t.refused {
				msg = "idle node still refuses sessions; nothing moved"
			}
			p.log.LogAttrs(ctx, slog.LevelInfo, msg,
				slog.String("from", busy.addr), slog.String("to", idle.addr), slog.Any("err", t.err))
			return nil
		}
		answering[idle] = true
		tested = true
		// Connections may have come and gone during the test-connect:
		// the loop looks again.
	}
	p.mu.Unlock()
	return nil
}

// spreadLocked returns the busiest upstream (the first listed among
// equals) and the upstream a round moves a connection to: among those
// holding at least two connections fewer, the first in least-used order
// counting the redials already on their way to each (planned), which is
// where the moved client's redial goes. idle is nil when the
// spread is even. An upstream the health checks mark down is never idle,
// nor one in slow start (moving connections to it at once is what slow
// start is there to prevent), nor one a move to which failed until a
// client's session holds there, nor one that answered again after
// refusing sessions while the last move's successor has not shown
// (sessionState.noMove).
func (p *Proxy) spreadLocked(now time.Time, planned map[*upstream]int) (busy, idle *upstream) {
	load := func(u *upstream) int { return u.load() + planned[u] }
	busy = p.upstreams[0]
	for _, u := range p.upstreams[1:] {
		if load(u) > load(busy) {
			busy = u
		}
	}
	for _, u := range p.upstreams {
		p.redialDueLocked(u) // forgets a redial that is not coming
		if p.cfg.CheckInterval > 0 && u.state == healthDown || p.weight(u, now) < 1 || u.sessions.noMove(now) {
			continue // down by the checks, in slow start, or its sessions are in doubt (session.go)
		}
		if load(u) <= load(busy)-2 && (idle == nil || p.beforeLoads(u, idle, load(u), load(idle), now)) {
			idle = u
		}
	}
	return busy, idle
}
