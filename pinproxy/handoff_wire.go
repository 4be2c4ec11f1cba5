package pinproxy

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The hand-over's wire format. Messages go over a Unix socket of type
// SOCK_SEQPACKET, so each keeps its bounds and its descriptors. A message
// is one byte of kind, then a JSON object:
//
//	old → new  'H' hello: version, pid, how many listeners and connections
//	               follow, the proxy's counters and every upstream's state
//	old → new  'B' batch: listeners and connections; its descriptors
//	               (SCM_RIGHTS) are each listener's, then each
//	               connection's client and upstream socket and the
//	               read end of each splice pipe it holds bytes in, in order
//	old → new  'E' end: the totals again, for the new side to check
//	new → old  'A' have: everything arrived
//	old → new  'C' commit: the connections are the new process's
//	new → old  'R' ready: the new process serves; its pid
//
// A change that an old reader would misread bumps wireVersion; a new
// process refuses another version, and the old one serves on.

const wireVersion = 1

const (
	msgHello  = 'H'
	msgBatch  = 'B'
	msgEnd    = 'E'
	msgHave   = 'A'
	msgCommit = 'C'
	msgReady  = 'R'
)

// Bounds a message is checked against; a batch is cut to fit them.
const (
	wireMaxFDs     = 200      // descriptors a message (the kernel takes 253)
	wireMaxMessage = 1 << 18  // bytes a message (a SOCK_SEQPACKET message must fit the send buffer)
	wireMaxPending = 64 << 10 // pending bytes a direction: at most a burst buffer's (smallBurst)
	wireMaxPipe    = 1 << 20  // bytes in a splice pipe handed over (splicePipeSize)
)

type wireHello struct {
	Version   int            `json:"version"`
	PID       int            `json:"pid"`
	Listeners int            `json:"listeners"`
	Conns     int            `json:"conns"`
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

// wireListener is one listener; one descriptor.
type wireListener struct {
	Addr   string `json:"addr"`
	Preset bool   `json:"preset,omitempty"` // keepalive set on the listening socket (Proxy.Listen)
	Extra  bool   `json:"extra,omitempty"`  // the caller's, not the proxy's
}

// wireConn is one connection; two descriptors, client then upstream.
type wireConn struct {
	Upstream string    `json:"upstream"`
	Start    int64     `json:"start"`            // accepted, Unix nanoseconds
	Up       int64     `json:"up"`               // bytes copied client → upstream
	Down     int64     `json:"down"`             // and back
	Ended    [2]bool   `json:"ended"`            // each direction's stream has ended cleanly (half-closed)
	First    int32     `json:"first,omitempty"`  // the side whose stream ended first
	Parked   bool      `json:"parked,omitempty"` // parked when it stopped
	Pending  [2][]byte `json:"pending,omitzero"` // read but not yet written, each direction
	// PipeBytes, when not 0, says a direction's splice was cut short with
	// that many bytes in its pipe, whose read end follows the
	// connection's two sockets among the descriptors.
	PipeBytes [2]int `json:"pipe_bytes,omitzero"`
}

// fds is how many descriptors the connection takes in a batch.
func (c wireConn) fds() int {
	n := 2
	for _, b := range c.PipeBytes {
		if b > 0 {
			n++
		}
	}
	return n
}

type wireBatch struct {
	Listeners []wireListener `json:"listeners,omitempty"`
	Conns     []wireConn     `json:"conns,omitempty"`
}

type wireEnd struct {
	Listeners int `json:"listeners"`
	Conns     int `json:"conns"`
}

type wireReady struct {
	PID int `json:"pid"`
}

// errWire is a malformed hand-over message.
var errWire = errors.New("pinproxy: hand-over: malformed message")

// encodeMsg returns the message of kind with v as its body.
func encodeMsg(kind byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("pinproxy: hand-over: encoding %c: %w", kind, err)
	}
	return append([]byte{kind}, b...), nil
}

// parseMsg decodes a message that arrived with nfds descriptors, wanting
// kind, into v (a pointer to the kind's body), and checks it.
func parseMsg(b []byte, nfds int, kind byte, v any) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty", errWire)
	}
	if b[0] != kind {
		return fmt.Errorf("%w: got kind %q, want %q", errWire, b[0], kind)
	}
	if err := json.Unmarshal(b[1:], v); err != nil {
		return fmt.Errorf("%w: %c: %v", errWire, kind, err)
	}
	want := 0
	switch m := v.(type) {
	case *wireHello:
		if m.Version != wireVersion {
			return fmt.Errorf("%w: version %d, this binary speaks %d", errWire, m.Version, wireVersion)
		}
		if m.Listeners < 0 || m.Conns < 0 {
			return fmt.Errorf("%w: hello: %d listeners, %d connections", errWire, m.Listeners, m.Conns)
		}
		for i, u := range m.Upstreams {
			if u.Addr == "" || u.State < int8(healthUnknown) || u.State > int8(healthDown) {
				return fmt.Errorf("%w: hello: upstream %d: addr %q, state %d", errWire, i+1, u.Addr, u.State)
			}
		}
	case *wireBatch:
		want = len(m.Listeners)
		for i, c := range m.Conns {
			if err := c.check(); err != nil {
				return fmt.Errorf("%w: connection %d: %v", errWire, i+1, err)
			}
			want += c.fds()
		}
	case *wireEnd:
		if m.Listeners < 0 || m.Conns < 0 {
			return fmt.Errorf("%w: end: %d listeners, %d connections", errWire, m.Listeners, m.Conns)
		}
	}
	if nfds != want {
		return fmt.Errorf("%w: %c: %d descriptors, want %d", errWire, kind, nfds, want)
	}
	return nil
}

func (c wireConn) check() error {
	switch {
	case c.Upstream == "":
		return errors.New("no upstream")
	case c.Up < 0 || c.Down < 0:
		return fmt.Errorf("byte counts %d, %d", c.Up, c.Down)
	case c.First < int32(sideNone) || c.First > int32(sideUpstream):
		return fmt.Errorf("first side %d", c.First)
	case len(c.Pending[0]) > wireMaxPending || len(c.Pending[1]) > wireMaxPending:
		return fmt.Errorf("%d and %d bytes pending, at most %d", len(c.Pending[0]), len(c.Pending[1]), wireMaxPending)
	case c.PipeBytes[0] < 0 || c.PipeBytes[1] < 0 || c.PipeBytes[0] > wireMaxPipe || c.PipeBytes[1] > wireMaxPipe:
		return fmt.Errorf("%d and %d bytes in pipes, want 0 to %d", c.PipeBytes[0], c.PipeBytes[1], wireMaxPipe)
	case c.PipeBytes[0] > 0 && (c.Ended[0] || len(c.Pending[0]) > 0) || c.PipeBytes[1] > 0 && (c.Ended[1] || len(c.Pending[1]) > 0):
		return errors.New("bytes in a pipe with the direction ended or bytes pending beside")
	case c.Parked && c.PipeBytes != [2]int{}:
		return errors.New("parked with bytes in a pipe")
	case c.Ended[0] && len(c.Pending[0]) > 0 || c.Ended[1] && len(c.Pending[1]) > 0:
		return errors.New("bytes pending on an ended direction")
	case c.Ended[0] && c.Ended[1]:
		return errors.New("both directions ended")
	case c.Parked && (c.Ended[0] || c.Ended[1] || len(c.Pending[0])+len(c.Pending[1]) > 0):
		return errors.New("parked with a direction ended or bytes pending")
	}
	return nil
}
