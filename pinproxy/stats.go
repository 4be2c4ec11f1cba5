package pinproxy

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// UpstreamStats is a snapshot of one upstream's state. Its JSON form is
// what cmd/pinproxy serves on /status.
type UpstreamStats struct {
	Addr string `json:"addr"` // as listed in Config.Upstreams

	// Live counts the connections open to this upstream, and Dialing
	// the dials to it in flight. Least-used order and rebalance rounds
	// compare their sum, so that clients accepted at once spread out.
	Live    int `json:"live"`
	Dialing int `json:"dialing"`

	Dials       int64     `json:"dials"`                 // connection attempts: clients' dials and rebalance test-connects
	Failures    int64     `json:"failures"`              // attempts that failed
	LastFailure time.Time `json:"last_failure,omitzero"` // zero if none failed
	LastError   string    `json:"last_error,omitempty"`  // the last failure's error; empty if none

	// Answered reports whether the last dial, test-connect or health
	// check answered. It is false before the first attempt.
	Answered bool `json:"answered"`

	// State is "up", "down" or "unknown" (nothing answered or failed
	// yet): the health checks' verdict when Config.CheckInterval is set,
	// else the last attempt's; "down" whatever those say while the
	// upstream refuses sessions.
	State string `json:"state"`

	// Refusing, while the upstream accepts connections but refuses the
	// sessions (see Config.RefusedWithin), says so with the figures:
	// "refusing sessions: 3 ended within 2ms". Empty otherwise.
	Refusing string `json:"refusing,omitempty"`
	// RefusedSessions counts the sessions it refused: clients' and
	// test-connects' sessions it ended within Config.RefusedWithin of
	// the dial having sent at most Config.RefusedBytes.
	RefusedSessions int64 `json:"refused_sessions"`

	// Removed is true for an upstream that SetUpstreams took out of the
	// list and that still has connections; Stats lists these last.
	Removed bool `json:"removed,omitempty"`

	Moved int64 `json:"moved"` // connections a rebalance round closed to move them away

	// BytesSent and BytesReceived count the bytes copied to this
	// upstream (from its clients) and from it (to its clients), as they
	// are copied, by every connection, live or closed: the directions
	// "sent" and "received" of the metric pinproxy_upstream_bytes_total.
	BytesSent     int64 `json:"bytes_sent"`
	BytesReceived int64 `json:"bytes_received"`
}

// Totals is a snapshot of counters for the whole proxy.
type Totals struct {
	Live     int   `json:"live"`     // client connections being handled, pinned or still dialing
	Accepted int64 `json:"accepted"` // client connections accepted, including those then closed
	Rejected int64 `json:"rejected"` // clients closed at once because MaxConns were being handled
	Unrouted int64 `json:"unrouted"` // clients closed because no upstream answered
	Moves    int64 `json:"moves"`    // connections closed by rebalance rounds and drains of removed upstreams

	// FailedMoves counts the moves whose client's redial the idle
	// upstream refused (a refused session: Config.RefusedWithin).
	FailedMoves int64 `json:"failed_moves"`

	// LocalErrors counts accepts, dials and checks that failed for want
	// of local resources (EMFILE, ENFILE, ENOBUFS, ENOMEM); these never
	// count against an upstream.
	LocalErrors int64 `json:"local_errors"`

	// Upgrades counts the times this process or one before it handed
	// its connections to a new process, and UpgradesFailed the times
	// the new one did not take them (the old one kept serving).
	Upgrades       int64 `json:"upgrades"`
	UpgradesFailed int64 `json:"upgrades_failed"`
}

// Stats returns a snapshot of every upstream, in the order of
// Config.Upstreams (or of the last SetUpstreams), then the removed
// upstreams that still have connections.
func (p *Proxy) Stats() []UpstreamStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	all := slices.Concat(p.upstreams, p.leaving)
	out := make([]UpstreamStats, len(all))
	for i, u := range all {
		out[i] = UpstreamStats{
			Addr:          u.addr,
			Live:          u.live,
			Dialing:       u.dialing,
			Dials:         u.dials,
			Failures:      u.failures,
			LastFailure:   u.lastFailure,
			LastError:     u.lastError,
			Answered:      u.answered,
			State:         u.shownState().String(),
			Refusing:      u.sessions.refusing,
			Removed:       u.removed,
			Moved:         u.moved,
			BytesSent:     u.bytes.up.Load(),
			BytesReceived: u.bytes.down.Load(),

			RefusedSessions: u.sessions.refused,
		}
	}
	return out
}

// Totals returns a snapshot of the proxy-wide counters.
func (p *Proxy) Totals() Totals {
	p.mu.Lock()
	moves, failedMoves := p.moves, p.failedMoves
	p.mu.Unlock()
	return Totals{
		Live:     int(p.active.Load()),
		Accepted: p.accepted.Load(),
		Rejected: p.rejected.Load(),
		Unrouted: p.unrouted.Load(),
		Moves:    moves,

		FailedMoves: failedMoves,

		LocalErrors: p.localErrors.Load(),

		Upgrades:       p.upg.ok.Load(),
		UpgradesFailed: p.upg.failed.Load(),
	}
}

// Ready returns nil while the proxy is serving (at least one listener,
// and Shutdown not called) and at least one upstream is up; else an
// error saying which of those is missing, for a /readyz to answer with.
//
// An upstream refusing sessions (Config.RefusedWithin) counts as down.
// With health checks off, health is passive, from clients' dials, and
// only clients would try an upstream again: one not tried yet counts as
// up, and one whose last dial failed counts as down only for
// Config.FailedBackoff (DefaultFailedBackoff when the back-off is off)
// after that failure, after which the next client tries it as any other.
// Otherwise a proxy behind a load balancer that sends clients only while
// it is ready would stay not ready for good once its upstreams had
// failed, even after they came back. With health checks on, Ready
// follows the checks alone.
func (p *Proxy) Ready() error {
	now := p.clock()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return errors.New("pinproxy: not ready: shutting down")
	case len(p.listeners) == 0:
		return errors.New("pinproxy: not ready: not listening")
	}
	passive := p.cfg.CheckInterval <= 0
	window := p.cfg.FailedBackoff
	if window <= 0 {
		window = DefaultFailedBackoff
	}
	for _, u := range p.upstreams {
		switch state := u.shownState(); {
		case state == healthUp:
			return nil
		case passive && state == healthUnknown:
			return nil
		case passive && state == healthDown && now.Sub(u.lastFailure) >= window:
			return nil
		}
	}
	if passive {
		return fmt.Errorf("pinproxy: not ready: no upstream up (%d listed, each failed its last dial or refused sessions within %v)", len(p.upstreams), window)
	}
	return fmt.Errorf("pinproxy: not ready: no upstream up (%d listed, none passing health checks)", len(p.upstreams))
}
