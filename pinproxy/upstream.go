package pinproxy

import (
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"
)

// This file is an upstream's state as the proxy keeps it: its load, its
// health and how it changes with each attempt, and the least-used order
// clients are sent in. Every function takes the time it runs at, from the
// proxy's clock.

// dialAddr is an upstream's address as the event loops dial it, parsed
// once for all its dials: tcp is nil for one given by name (or with an
// IPv6 zone), which Go's dialer resolves at each dial. tcp is every one
// of its connections' upstream address (heldConn.RemoteAddr).
type dialAddr struct {
	ap  netip.AddrPort
	tcp *net.TCPAddr
}

// upstream is one configured upstream and its live connections. All fields
// but addr and parsed are guarded by Proxy.mu.
type upstream struct {
	addr   string
	parsed atomic.Pointer[dialAddr] // addr, as the event loops dial it (connect_linux.go)

	live    int   // connections established, linked into head..tail
	dialing int   // dials in flight to it (counted as load too)
	head    *conn // oldest
	tail    *conn // newest

	dials        int64
	failures     int64
	lastFailure  time.Time
	lastError    string
	answered     bool // the last attempt (dial, test-connect or check) answered
	lastFailed   bool // the last attempt failed: the next dial to it is a probe
	backoffUntil time.Time
	moved        int64
	bytes        byteCounters // live, not guarded by mu

	// state is what Stats and the metrics call up, down or unknown: the
	// checks' verdict when Config.CheckInterval is set, else the last
	// attempt's. upSince is when it last went from down to up (slow
	// start); rise and fall count the checks in a row that answered and
	// failed.
	state      health
	upSince    time.Time
	rise, fall int
	// recovered: it came back up from down, and the spread has not been
	// even since; a rebalance move to it then says "answers again".
	recovered bool
	// connectFailed: a connect to it failed since it was last up, so
	// when it is up again it may be another process (upLocked). A
	// session or an exchange that failed after the connect says the
	// same process still runs there.
	connectFailed bool

	removed   bool      // taken out by SetUpstreams; kept while connections are left
	removedAt time.Time // when

	sessions sessionState // refused and held sessions (session.go)
	probe    probeState   // its test-connects, one at a time (probe.go)
}

func (u *upstream) load() int { return u.live + u.dialing }

// health is an upstream's state as the operator sees it.
type health int8

const (
	healthUnknown health = iota // nothing has answered or failed yet
	healthUp
	healthDown
)

func (h health) String() string {
	switch h {
	case healthUp:
		return "up"
	case healthDown:
		return "down"
	}
	return "unknown"
}

// pickLocked returns the upstream not yet tried that comes first in
// least-used order (see before). It returns nil when every upstream was
// tried. With health checks on, an upstream they mark down is never picked.
func (p *Proxy) pickLocked(tried []uint64, now time.Time) (int, *upstream) {
	best := -1
	checks := p.cfg.CheckInterval > 0
	for i, u := range p.upstreams {
		if tried[i/64]&(1<<(i%64)) != 0 || checks && u.state == healthDown {
			continue
		}
		if best < 0 || p.before(u, p.upstreams[best], now) {
			best = i
		}
	}
	if best < 0 {
		return -1, nil
	}
	return best, p.upstreams[best]
}

// before reports whether a comes before b in least-used order, given b is
// listed before a: an upstream that did not just fail comes before one
// that did; then fewer live connections (weighed by slow start); then,
// among upstreams that just failed, the one whose failure is oldest (so
// that rounds and redials take turns among them); then the one listed
// first. An upstream whose back-off is over but whose last attempt failed
// counts as just failed while a dial to it is in flight: one client
// probes it, and the others do not wait on it too. Both must be guarded
// by Proxy.mu.
func (p *Proxy) before(a, b *upstream, now time.Time) bool {
	return p.beforeLoads(a, b, a.load(), b.load(), now)
}

// beforeLoads is before with la and lb for a's and b's live connections:
// a rebalance round adds the redials it sent to each.
func (p *Proxy) beforeLoads(a, b *upstream, la, lb int, now time.Time) bool {
	aBack, bBack := a.backingOff(now), b.backingOff(now)
	if aBack != bBack {
		return bBack
	}
	if wa, wb := p.weight(a, now), p.weight(b, now); wa != 1 || wb != 1 {
		// Compare (la+1)/wa with (lb+1)/wb: an upstream at a tenth of
		// its weight takes a client only when the other holds ten
		// times its load.
		fa, fb := float64(la+1)*wb, float64(lb+1)*wa
		if fa != fb {
			return fa < fb
		}
	} else if la != lb {
		return la < lb
	}
	return aBack && a.backoffEnd().Before(b.backoffEnd())
}

// backingOff reports whether u counts as just failed; see before. An
// upstream refusing sessions counts as just failed during its back-off,
// and after it while a session to it is on trial.
func (u *upstream) backingOff(now time.Time) bool {
	return now.Before(u.backoffUntil) || u.lastFailed && u.dialing > 0 || u.sessions.backingOff(now)
}

// backoffEnd is when u's back-off ends, for the order among upstreams
// that just failed.
func (u *upstream) backoffEnd() time.Time {
	if u.sessions.refusing != "" && u.sessions.until.After(u.backoffUntil) {
		return u.sessions.until
	}
	return u.backoffUntil
}

// weight is u's share of new clients during slow start, from just above 0
// when it comes back up to 1 once Config.SlowStart has passed.
func (p *Proxy) weight(u *upstream, now time.Time) float64 {
	if p.cfg.SlowStart <= 0 || u.upSince.IsZero() {
		return 1
	}
	since := now.Sub(u.upSince)
	if since >= p.cfg.SlowStart {
		return 1
	}
	return max(float64(since)/float64(p.cfg.SlowStart), 0.01)
}

// failedLocked records a failed attempt to u: a client's dial, a rebalance
// test-connect, or (check) a health check; connected: the connect
// answered, and the exchange or the session after it failed.
func (p *Proxy) failedLocked(u *upstream, now time.Time, err error, check, connected bool) {
	if !connected {
		u.connectFailed = true
	}
	u.failures++
	u.lastFailure = now
	u.lastError = err.Error()
	u.answered = false
	u.lastFailed = true
	if p.cfg.FailedBackoff > 0 {
		u.backoffUntil = now.Add(p.cfg.FailedBackoff)
	}
	switch {
	case p.cfg.CheckInterval <= 0:
		u.state = healthDown
	case check:
		u.rise = 0
		u.fall++
		if u.state != healthDown && u.fall >= p.cfg.CheckFall {
			u.state = healthDown
			p.log.LogAttrs(p.stopCtx, slog.LevelWarn, "health check: upstream down",
				slog.String("upstream", u.addr), slog.Int("failed_checks", u.fall), slog.Any("err", err))
		}
	}
}

// answeredLocked records an attempt to u that answered.
func (p *Proxy) answeredLocked(u *upstream, now time.Time, check bool) {
	u.answered = true
	u.lastFailed = false
	u.backoffUntil = time.Time{}
	switch {
	case p.cfg.CheckInterval <= 0:
		p.upLocked(u, now)
	case check:
		u.fall = 0
		u.rise++
		if u.state == healthUnknown || u.state == healthDown && u.rise >= p.cfg.CheckRise {
			if u.state == healthDown {
				p.log.LogAttrs(p.stopCtx, slog.LevelInfo, "health check: upstream up",
					slog.String("upstream", u.addr), slog.Int("passed_checks", u.rise))
			}
			p.upLocked(u, now)
		}
	}
}

// upLocked marks u up; coming back from down starts its slow start. One
// that refused connects meanwhile is taken for another process, whose
// sessions are judged afresh; one whose sessions alone failed (a node
// whose slots were full) is not: it goes on as refusing sessions said.
func (p *Proxy) upLocked(u *upstream, now time.Time) {
	if u.state == healthDown {
		u.upSince = now
		u.recovered = true
		if u.connectFailed {
			u.sessions.restarted()
		}
	}
	u.connectFailed = false
	u.state = healthUp
}
