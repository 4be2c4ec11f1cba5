package pinproxy

import "time"

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

	// Answered reports whether the last dial or test-connect answered.
	// It is true before the first attempt: nothing says otherwise yet.
	Answered bool `json:"answered"`

	Moved int64 `json:"moved"` // connections a rebalance round closed to move them away

	// BytesUp and BytesDown count the bytes copied to and from this
	// upstream, as they are copied, by every connection, live or closed.
	BytesUp   int64 `json:"bytes_up"`
	BytesDown int64 `json:"bytes_down"`
}

// Totals is a snapshot of counters for the whole proxy.
type Totals struct {
	Live     int   `json:"live"`     // client connections being handled, pinned or still dialing
	Accepted int64 `json:"accepted"` // client connections accepted, including those then closed
	Rejected int64 `json:"rejected"` // clients closed at once because MaxConns were being handled
	Unrouted int64 `json:"unrouted"` // clients closed because no upstream answered
	Moves    int64 `json:"moves"`    // connections closed by rebalance rounds
}

// Stats returns a snapshot of every upstream, in the order of
// Config.Upstreams.
func (p *Proxy) Stats() []UpstreamStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]UpstreamStats, len(p.upstreams))
	for i, u := range p.upstreams {
		out[i] = UpstreamStats{
			Addr:        u.addr,
			Live:        u.live,
			Dialing:     u.dialing,
			Dials:       u.dials,
			Failures:    u.failures,
			LastFailure: u.lastFailure,
			LastError:   u.lastError,
			Answered:    u.answered,
			Moved:       u.moved,
			BytesUp:     u.bytes.up.Load(),
			BytesDown:   u.bytes.down.Load(),
		}
	}
	return out
}

// Totals returns a snapshot of the proxy-wide counters.
func (p *Proxy) Totals() Totals {
	var moves int64 // the upstreams' Moved, summed: each move is counted on the upstream it left
	p.mu.Lock()
	for _, u := range p.upstreams {
		moves += u.moved
	}
	p.mu.Unlock()
	return Totals{
		Live:     int(p.active.Load()),
		Accepted: p.accepted.Load(),
		Rejected: p.rejected.Load(),
		Unrouted: p.unrouted.Load(),
		Moves:    moves,
	}
}
