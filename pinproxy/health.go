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
			dctx, cancel := context.WithTimeout(ctx, timeout)
			c, err := p.dial(dctx, "tcp", u.addr)
			cancel()
			if ctx.Err() != nil {
				if c != nil {
					c.Close()
				}
				return
			}
			if err != nil && localError(err) {
				p.logLocal("health check: cannot connect for want of local resources",
					slog.String("upstream", u.addr), slog.Any("err", err))
				return
			}
			if c != nil {
				c.Close()
			}
			p.mu.Lock()
			u.dials++
			if err != nil {
				p.failedLocked(u, err, true)
			} else {
				p.answeredLocked(u, true)
			}
			p.mu.Unlock()
		})
	}
	wg.Wait()
}
