package pinproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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
// neither. An upstream whose test-connect must wait (probe.go) is left
// out of the round.
func (p *Proxy) checkRound(ctx context.Context) {
	p.mu.Lock()
	var ups []*upstream
	var hold []bool
	for _, u := range p.upstreams {
		if p.checkProbeLocked(u) {
			ups = append(ups, u)
			hold = append(hold, u.sessions.refusedRecently())
		}
	}
	p.mu.Unlock()
	timeout := min(p.cfg.DialTimeout, p.cfg.CheckInterval)
	var wg sync.WaitGroup
	for i, u := range ups {
		wg.Go(func() {
			r := p.testConnect(ctx, u, timeout, hold[i], "health check: cannot connect for want of local resources",
				slog.String("upstream", u.addr))
			p.mu.Lock()
			defer p.mu.Unlock()
			u.endProbeLocked(r)
			if r.out == gaveUp || r.out == noResources || ctx.Err() != nil {
				return
			}
			u.dials++
			p.testedLocked(u, r, true)
		})
	}
	wg.Wait()
}

// tested is what a test-connect (testConnect) came to.
type tested struct {
	out outcome // answered, refused (the connect, the exchange or the session failed), noResources or gaveUp
	err error   // why not answered
	// dialed is when the connect answered. held: the upstream held the
	// session for RefusedWithin. refused: it refused the session, after
	// life.
	dialed  time.Time
	held    bool
	refused bool
	life    time.Duration
}

// testConnect is a test-connect to u, for a health check, a rebalance
// round or a drain: a dial within timeout; then, with Config.CheckExpect,
// the check's exchange within CheckTimeout; then, if hold, the
// connection held until RefusedWithin after the dial, to see whether the
// upstream ends the session (it answers only if it does not). What the
// upstream sends is read and dropped. ctx ending aborts it (gaveUp).
func (p *Proxy) testConnect(ctx context.Context, u *upstream, timeout time.Duration, hold bool, local string, attrs ...slog.Attr) tested {
	c, out, err := p.attempt(ctx, u, timeout, local, attrs...)
	if out != answered {
		return tested{out: out, err: err}
	}
	defer c.Close()
	t := tested{out: answered, dialed: time.Now()}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var got int64 // bytes the upstream sent
	if len(p.cfg.CheckExpect) > 0 {
		c.SetDeadline(t.dialed.Add(p.cfg.CheckTimeout))
		if ended, err := p.exchange(c, &got); err != nil {
			return p.testFailed(ctx, t, got, err, ended)
		}
	}
	if !hold || p.cfg.RefusedWithin < 0 {
		return t
	}
	c.SetDeadline(t.dialed.Add(p.cfg.RefusedWithin))
	n, err := io.Copy(io.Discard, c)
	got += n
	if isTimeout(err) && ctx.Err() == nil {
		t.held = true
		return t
	}
	if err == nil {
		err = io.EOF
	}
	return p.testFailed(ctx, t, got, fmt.Errorf("the upstream ended the session: %w", err), true)
}

// isTimeout reports whether err is a deadline's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// testFailed is the result of a test-connect whose exchange or held
// session failed with err after the connect, the upstream having sent got
// bytes; ended: the upstream ended the session (an EOF or a reset). That
// is a refused session within RefusedWithin of the dial when the upstream
// sent at most RefusedBytes.
func (p *Proxy) testFailed(ctx context.Context, t tested, got int64, err error, ended bool) tested {
	if ctx.Err() != nil {
		return tested{out: gaveUp, err: ctx.Err()}
	}
	t.out, t.life = refused, time.Since(t.dialed)
	t.refused = ended && p.cfg.RefusedWithin >= 0 && t.life < p.cfg.RefusedWithin && got <= p.cfg.RefusedBytes
	if ended {
		err = fmt.Errorf("%w (after %v, having sent %d bytes)", err, roundForLog(t.life), got)
	}
	t.err = err
	return t
}

// exchange writes Config.CheckSend to c and reads the reply's first
// len(CheckExpect) bytes, counting them in got; it fails unless they are
// CheckExpect, and says whether the upstream ended the session (ended).
// c's deadline bounds it.
func (p *Proxy) exchange(c net.Conn, got *int64) (ended bool, err error) {
	if len(p.cfg.CheckSend) > 0 {
		if _, err := c.Write(p.cfg.CheckSend); err != nil {
			return !isTimeout(err), fmt.Errorf("check: send: %w", err)
		}
	}
	want := p.cfg.CheckExpect
	buf := make([]byte, len(want))
	n, err := io.ReadFull(c, buf)
	*got = int64(n)
	switch {
	case isTimeout(err):
		return false, fmt.Errorf("check: %d of the %d bytes expected within %v: %w", n, len(want), p.cfg.CheckTimeout, err)
	case err != nil:
		return true, fmt.Errorf("check: %d of the %d bytes expected, then the upstream ended the session: %w", n, len(want), err)
	case !bytes.Equal(buf, want):
		return false, fmt.Errorf("check: reply %s, want %s", shortHex(buf), shortHex(want))
	}
	return false, nil
}

// shortHex is b in hex, cut after 32 bytes.
func shortHex(b []byte) string {
	if len(b) > 32 {
		return fmt.Sprintf("%x…", b[:32])
	}
	return fmt.Sprintf("%x", b)
}

// testedLocked records a test-connect's outcome (answered or refused) to
// u, a health check's if check. It reports whether u answered.
func (p *Proxy) testedLocked(u *upstream, t tested, check bool) bool {
	now := p.clock()
	if t.out != answered {
		if t.refused {
			p.refusedLocked(u, t.life, false, false)
		}
		p.failedLocked(u, now, t.err, check, !t.dialed.IsZero())
		return false
	}
	p.answeredLocked(u, now, check)
	if t.held {
		p.heldLocked(u, t.dialed, false)
	}
	return true
}
