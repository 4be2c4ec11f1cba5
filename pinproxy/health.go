package pinproxy

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// checkLoop runs a round of health checks at once and then every
// Config.CheckInterval until Shutdown.
func (p *Proxy) checkLoop() {
	defer p.ticker.Done()
	t := time.NewTicker(p.cfg.CheckInterval)
	defer t.Stop()
	for {
		p.checkRound(p.stopCtx)
		select {
		case <-p.stopCtx.Done():
			return
		case <-t.C:
		}
	}
}

// checkRound test-connects every upstream in the list at once and records
// each answer or failure. A failure for want of local resources counts as
// neither.
func (p *Proxy) checkRound(ctx context.Context) {
	p.mu.Lock()
	ups := append([]*upstream(nil), p.upstreams...)
	p.mu.Unlock()
	timeout := min(p.cfg.DialTimeout, p.cfg.CheckInterval)
	var wg sync.WaitGroup
	for _, u := range ups {
		wg.Go(func() {
			c, out, err := p.attempt(ctx, u, timeout, "health check: cannot connect for want of local resources",
				slog.String("upstream", u.addr))
			if c != nil {
				c.Close()
			}
			if out == gaveUp || out == noResources || ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			u.dials++
			if out == refused {
				p.failedLocked(u, p.clock(), err, true)
			} else {
				p.answeredLocked(u, p.clock(), true)
			}
			p.mu.Unlock()
		})
	}
	wg.Wait()
}
