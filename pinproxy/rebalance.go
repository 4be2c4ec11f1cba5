package pinproxy

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

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
// At most one connection is closed per round, and rounds do not overlap.
// Every outcome is logged. Deciding to close nothing is not an error:
// Rebalance returns an error only when ctx ends during the test-connect,
// or ErrProxyClosed after Shutdown.
func (p *Proxy) Rebalance(ctx context.Context) error {
	p.rebalanceMu.Lock()
	defer p.rebalanceMu.Unlock()

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrProxyClosed
	}
	busy, idle := p.spreadLocked(time.Now())
	if idle == nil {
		most := busy.load()
		p.mu.Unlock()
		p.log.LogAttrs(ctx, slog.LevelDebug, "rebalance: spread is even; nothing to do",
			slog.Int("most", most))
		return nil
	}
	idle.dials++
	p.mu.Unlock()

	dctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	tc, err := p.dial(dctx, "tcp", idle.addr)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("pinproxy: rebalance: test-connect to %s: %w", idle.addr, ctx.Err())
		}
		p.mu.Lock()
		p.failedLocked(idle, err)
		p.mu.Unlock()
		p.log.LogAttrs(ctx, slog.LevelInfo, "idle node still does not answer; nothing moved",
			slog.String("from", busy.addr), slog.String("to", idle.addr), slog.Any("err", err))
		return nil
	}
	tc.Close()

	p.mu.Lock()
	idle.answered = true
	idle.backoffUntil = time.Time{}
	if p.closed {
		p.mu.Unlock()
		return ErrProxyClosed
	}
	// Connections may have come and gone during the test-connect: look again.
	busy, _ = p.spreadLocked(time.Now())
	c := busy.tail
	if busy.load()-idle.load() < 2 || c == nil {
		p.mu.Unlock()
		p.log.LogAttrs(ctx, slog.LevelDebug, "rebalance: spread evened out during the test-connect; nothing moved",
			slog.String("to", idle.addr))
		return nil
	}
	p.unlinkLocked(c)
	busy.moved++
	p.mu.Unlock()

	p.park.closePair(c.client, c.upstream)
	p.log.LogAttrs(ctx, slog.LevelInfo, "answers again; moving a connection",
		slog.String("from", busy.addr), slog.String("to", idle.addr))
	return nil
}

// spreadLocked returns the busiest upstream (the first listed among
// equals) and the upstream a round moves a connection to: among those
// holding at least two connections fewer, the first in least-used order,
// which is where the moved client's redial goes. idle is nil when the
// spread is even.
func (p *Proxy) spreadLocked(now time.Time) (busy, idle *upstream) {
	busy = p.upstreams[0]
	for _, u := range p.upstreams[1:] {
		if u.load() > busy.load() {
			busy = u
		}
	}
	for _, u := range p.upstreams {
		if u.load() <= busy.load()-2 && (idle == nil || before(u, idle, now)) {
			idle = u
		}
	}
	return busy, idle
}
