package pinproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The proxy's own state in a hand-over (package handover carries it as it
// is, beside the listeners and connections): the proxy-wide counters and
// every upstream's state, so that the new process's counters go on from
// the old one's and its rules (down, backing off, in slow start, removed)
// pick up where they were.

type wireState struct {
	Totals    wireTotals     `json:"totals"`
	Upstreams []wireUpstream `json:"upstreams"`
}

type wireTotals struct {
	Accepted       int64 `json:"accepted"`
	Rejected       int64 `json:"rejected"`
	Unrouted       int64 `json:"unrouted"`
	LocalErrors    int64 `json:"local_errors"`
	Moves          int64 `json:"moves"`
	Upgrades       int64 `json:"upgrades"`
	UpgradesFailed int64 `json:"upgrades_failed"`
}

// wireUpstream is an upstream's state; times are Unix nanoseconds, 0 for
// the zero time.
type wireUpstream struct {
	Addr         string `json:"addr"`
	Dials        int64  `json:"dials"`
	Failures     int64  `json:"failures"`
	Moved        int64  `json:"moved"`
	BytesUp      int64  `json:"bytes_up"`
	BytesDown    int64  `json:"bytes_down"`
	LastFailure  int64  `json:"last_failure,omitempty"`
	LastError    string `json:"last_error,omitempty"`
	BackoffUntil int64  `json:"backoff_until,omitempty"`
	UpSince      int64  `json:"up_since,omitempty"`
	Answered     bool   `json:"answered,omitempty"`
	LastFailed   bool   `json:"last_failed,omitempty"`
	State        int8   `json:"state"`
	Rise         int    `json:"rise,omitempty"`
	Fall         int    `json:"fall,omitempty"`
	Removed      bool   `json:"removed,omitempty"`
	RemovedAt    int64  `json:"removed_at,omitempty"`
}

// errState is a malformed state from the old process.
var errState = errors.New("pinproxy: hand-over: malformed proxy state")

// parseState decodes and checks the old process's state.
func parseState(b []byte) (wireState, error) {
	var s wireState
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%w: %v", errState, err)
	}
	for i, u := range s.Upstreams {
		if u.Addr == "" || u.State < int8(healthUnknown) || u.State > int8(healthDown) {
			return s, fmt.Errorf("%w: upstream %d: addr %q, state %d", errState, i+1, u.Addr, u.State)
		}
	}
	return s, nil
}

// unixNano is t in Unix nanoseconds, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromUnixNano undoes unixNano.
func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
