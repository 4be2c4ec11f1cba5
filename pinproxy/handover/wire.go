package handover

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The wire format. Messages go over a Unix socket of type SOCK_SEQPACKET,
// so each keeps its bounds and its descriptors. A message is one byte of
// kind, then a JSON object:
//
//	new → old  'Q' request: version, pid; the old process pauses nothing
//	               before it has this (a peer that connects and says
//	               nothing is dropped after Config.Stall)
//	old → new  'H' hello: version, pid, how many listeners and connections
//	               follow, and the sender's own state (opaque here)
//	old → new  'B' batch: listeners and connections; its descriptors
//	               (SCM_RIGHTS) are each listener's, then each
//	               connection's client and upstream socket and the read
//	               end of each pipe it holds bytes in, in order
//	old → new  'E' end: the totals again, for the new side to check
//	new → old  'A' have: everything arrived
//	new → old  'R' ready: the new process has started everything but the
//	               copying and accepting, which wait for the commit
//	old → new  'C' commit: the old process will touch nothing more
//	new → old  'S' serving: sent before the new process touches a socket;
//	               until the old one reads it, it can take everything back
//	old → new  'X' taken back: after the commit, the old process stopped
//	               waiting for "serving" and serves on; a new process
//	               whose "serving" failed and that finds the socket closed
//	               without it knows the old one died, and serves
//
// A change that an old reader would misread bumps Version; either side
// refuses another version, and the old one serves on, with one exception:
// a new process takes over from an old one of version 1 (pinproxy
// 0.1.0), which starts with its hello ('H', the proxy's counters in it),
// sends its batches with listeners flagged "preset" and "extra", takes
// "have", commits at once, and lets everything go then; the new process
// starts at the commit, then says it is ready ('R').

// Version is the wire format's version.
const Version = 2

const (
	msgVersion = 'V'
	msgRequest = 'Q'
	msgHello   = 'H'
	msgBatch   = 'B'
	msgEnd     = 'E'
	msgHave    = 'A'
	msgReady   = 'R'
	msgCommit  = 'C'
	msgServing = 'S'
	msgTaken   = 'X'
)

// Bounds a message is checked against; a batch is cut to fit them.
const (
	maxFDs     = 200     // descriptors a message (the kernel takes 253)
	maxMessage = 1 << 18 // bytes a message (a SOCK_SEQPACKET message must fit the send buffer)
	// MaxPending is the most bytes a direction of a connection may
	// carry read but not written (a data path's burst buffer).
	MaxPending = 64 << 10
	// MaxPipe is the most bytes a direction's pipe may hold.
	MaxPipe  = 1 << 20
	maxState = 1 << 17 // bytes of the sender's own state in a hello
)

// wireVersion is the old process's first message.
type wireVersion struct {
	Version int `json:"version"`
	PID     int `json:"pid"`
}

type wireRequest struct {
	Version int `json:"version"`
	PID     int `json:"pid"`
}

type wireHello struct {
	Version   int             `json:"version"`
	PID       int             `json:"pid"`
	Listeners int             `json:"listeners"`
	Conns     int             `json:"conns"`
	State     json.RawMessage `json:"state,omitempty"`
}

// wireHelloV1 is a version 1 hello; the rest of it (totals, upstreams)
// is the sender's state.
type wireHelloV1 struct {
	Version   int `json:"version"`
	PID       int `json:"pid"`
	Listeners int `json:"listeners"`
	Conns     int `json:"conns"`
}

// wireBatchV1 is a version 1 batch: its connections are as ConnState,
// its listeners flagged.
type wireBatchV1 struct {
	Listeners []struct {
		Addr   string `json:"addr"`
		Preset bool   `json:"preset,omitempty"`
		Extra  bool   `json:"extra,omitempty"`
	} `json:"listeners,omitempty"`
	Conns []ConnState `json:"conns,omitempty"`
}

// wireListener is one listener; one descriptor.
type wireListener struct {
	Addr string `json:"addr"`
	Name string `json:"name,omitempty"`
}

type wireBatch struct {
	Listeners []wireListener `json:"listeners,omitempty"`
	Conns     []ConnState    `json:"conns,omitempty"`
}

type wireEnd struct {
	Listeners int `json:"listeners"`
	Conns     int `json:"conns"`
}

type wirePID struct {
	PID int `json:"pid"`
}

// ConnState is what moves with a connection besides its descriptors:
// where it goes, its counters, which directions have ended, and the bytes
// read from one side and not yet written to the other.
type ConnState struct {
	Upstream string    `json:"upstream"`
	Start    int64     `json:"start"`            // accepted, Unix nanoseconds
	Up       int64     `json:"up"`               // bytes copied client → upstream
	Down     int64     `json:"down"`             // and back
	Ended    [2]bool   `json:"ended"`            // each direction's stream has ended cleanly (half-closed)
	First    int32     `json:"first,omitempty"`  // the side whose stream ended first: 0 none, 1 client, 2 upstream
	Parked   bool      `json:"parked,omitempty"` // idle, waiting for a byte with no goroutine
	Pending  [2][]byte `json:"pending,omitzero"` // read but not yet written, each direction
	// PipeBytes, when not 0, says a direction holds that many bytes in a
	// pipe, whose read end follows the connection's two sockets among
	// the descriptors.
	PipeBytes [2]int `json:"pipe_bytes,omitzero"`
}

// fds is how many descriptors the connection takes in a batch.
func (c ConnState) fds() int {
	n := 2
	for _, b := range c.PipeBytes {
		if b > 0 {
			n++
		}
	}
	return n
}

// errWire is a malformed message.
var errWire = errors.New("handover: malformed message")

// encodeMsg returns the message of kind with v as its body.
func encodeMsg(kind byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("handover: encoding %c: %w", kind, err)
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
	case *wireVersion:
		if m.Version != Version {
			return fmt.Errorf("%w: the old process speaks version %d, this one %d", errWire, m.Version, Version)
		}
	case *wireHelloV1:
		if m.Version != 1 || m.Listeners < 0 || m.Conns < 0 {
			return fmt.Errorf("%w: version 1 hello: version %d, %d listeners, %d connections", errWire, m.Version, m.Listeners, m.Conns)
		}
	case *wireBatchV1:
		want = len(m.Listeners)
		for i, c := range m.Conns {
			if err := c.check(); err != nil {
				return fmt.Errorf("%w: connection %d: %v", errWire, i+1, err)
			}
			want += c.fds()
		}
	case *wireRequest:
		if m.Version != Version {
			return fmt.Errorf("%w: the new process speaks version %d, this one %d", errWire, m.Version, Version)
		}
	case *wireHello:
		switch {
		case m.Version != Version:
			return fmt.Errorf("%w: the old process speaks version %d, this one %d", errWire, m.Version, Version)
		case m.Listeners < 0 || m.Conns < 0:
			return fmt.Errorf("%w: hello: %d listeners, %d connections", errWire, m.Listeners, m.Conns)
		case len(m.State) > maxState:
			return fmt.Errorf("%w: hello: %d bytes of state, at most %d", errWire, len(m.State), maxState)
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

func (c ConnState) check() error {
	switch {
	case c.Upstream == "":
		return errors.New("no upstream")
	case c.Up < 0 || c.Down < 0:
		return fmt.Errorf("byte counts %d, %d", c.Up, c.Down)
	case c.First < 0 || c.First > 2:
		return fmt.Errorf("first side %d", c.First)
	case len(c.Pending[0]) > MaxPending || len(c.Pending[1]) > MaxPending:
		return fmt.Errorf("%d and %d bytes pending, at most %d", len(c.Pending[0]), len(c.Pending[1]), MaxPending)
	case c.PipeBytes[0] < 0 || c.PipeBytes[1] < 0 || c.PipeBytes[0] > MaxPipe || c.PipeBytes[1] > MaxPipe:
		return fmt.Errorf("%d and %d bytes in pipes, want 0 to %d", c.PipeBytes[0], c.PipeBytes[1], MaxPipe)
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
