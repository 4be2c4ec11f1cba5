package pinproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Defaults for the zero values of Config.
const (
	DefaultDialTimeout       = 5 * time.Second
	DefaultRebalanceInterval = time.Minute
	DefaultFailedBackoff     = 30 * time.Second
	DefaultKeepAlive         = 30 * time.Second
	DefaultParkAfter         = 30 * time.Second
	DefaultMaxDialAttempts   = 3

	// HAProxy's defaults for its inter, rise and fall.
	DefaultCheckRise = 2
	DefaultCheckFall = 3

	// Refused sessions (Config.RefusedWithin): a session the upstream
	// ends within 2 s of the dial, having sent at most 4 KiB, is refused;
	// 3 in a row, none held in between, and the upstream is refusing
	// sessions.
	DefaultRefusedWithin   = 2 * time.Second
	DefaultRefusedBytes    = 4 << 10
	DefaultRefusedSessions = 3
)

// ErrNoUpstreams is returned by New and SetUpstreams for an empty list.
var ErrNoUpstreams = errors.New("pinproxy: no upstreams: at least one host:port is required")

// UpstreamError reports a bad entry in a list of upstreams, from New,
// SetUpstreams or ParseUpstreams.
type UpstreamError struct {
	Index int    // the entry's position in the list, from 1
	Line  int    // its line in an upstreams file (ParseUpstreams); 0 otherwise
	Addr  string // the entry as given
	Err   error  // what is wrong with it
}

func (e *UpstreamError) Error() string { return "pinproxy: " + e.Detail() }

// Detail is the message without the package's prefix, for a program that
// names the flag or file itself: `upstream 2 "a b:1": host has a space`
// or, from a file, `line 3: "a b:1": host has a space`.
func (e *UpstreamError) Detail() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %q: %v", e.Line, e.Addr, e.Err)
	}
	return fmt.Sprintf("upstream %d %q: %v", e.Index, e.Addr, e.Err)
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// Config configures a Proxy. Only Upstreams is required; every other zero
// value means the default documented on the field.
type Config struct {
	// Upstreams lists the upstream addresses as host:port, in order of
	// preference: when two upstreams hold as many live connections, the
	// one listed first gets the next client. Hosts are resolved at each
	// dial, so a name that moves to another address is followed. At least
	// one is required, and none may be listed twice.
	Upstreams []string

	// DialTimeout bounds each dial to an upstream, including a rebalance
	// round's test-connect. Zero means DefaultDialTimeout (5 s).
	DialTimeout time.Duration

	// RebalanceInterval is the time between rebalance rounds while the
	// proxy serves. Zero means DefaultRebalanceInterval (1 min); a
	// negative value turns the rounds off (Rebalance can still be called).
	RebalanceInterval time.Duration

	// FailedBackoff is how long an upstream whose dial or test-connect
	// just failed is tried after every other upstream. It is still tried
	// when all the others fail. Zero means DefaultFailedBackoff (30 s); a
	// negative value turns the back-off off.
	FailedBackoff time.Duration

	// MaxDialAttempts is the most upstreams a client's dials try, in
	// least-used order, before the client is closed, so that a list of
	// many upstreams that refuse costs a client a few dials, not one per
	// upstream. Zero means DefaultMaxDialAttempts (3); a negative value
	// means no limit: every upstream is tried.
	MaxDialAttempts int

	// MaxConns caps the client connections handled at once; a client
	// accepted over the cap is closed at once. Zero means no limit.
	// MaxConnsForFiles gives a cap that fits the process's open-file
	// limit.
	MaxConns int

	// RebalanceMaxMoves is the most connections a rebalance round closes.
	// Zero means one, the pin-proxy pull request's rule; more moves a
	// large skew over in fewer rounds.
	RebalanceMaxMoves int

	// DrainRemoved, when positive, is how long the connections of an
	// upstream that SetUpstreams removed are left alone; after that, each
	// rebalance round moves one of them as it moves a connection back to
	// an idle node: if the upstream in the list that a redial would go to
	// answers a test-connect, the removed upstream's newest connection is
	// closed, and its client redials into the list. The connection is
	// closed as a round's move is: no sooner than 100 ms after that
	// test-connect ended, and the health checks leave the upstream out
	// while the redial is due. Zero leaves those connections until they
	// close by themselves.
	DrainRemoved time.Duration

	// CheckInterval, when positive, turns on active health checks: every
	// CheckInterval each upstream is test-connected (within the lesser
	// of DialTimeout and CheckInterval). After CheckFall failed checks in
	// a row an upstream is down: it takes no clients and no rebalance
	// moves, and only the checks connect to it, until CheckRise checks
	// in a row answer. An upstream not checked yet takes clients. An
	// upstream's test-connects go one at a time: a check is left out
	// while a rebalance round's or a drain's test-connect to it is under
	// way, within 100 ms (at most a quarter of an interval) of the last
	// one's end, and while a move's redial is due there; a round waits
	// for a check under way and takes its answer. Zero means off: health
	// is passive, from clients' dials.
	CheckInterval time.Duration
	CheckRise     int // zero means DefaultCheckRise (2)
	CheckFall     int // zero means DefaultCheckFall (3)

	// CheckSend and CheckExpect, when CheckExpect is set, make every
	// test-connect an application-level check, as HAProxy's tcp-check
	// send and expect: a health check (CheckInterval), a rebalance
	// round's test-connect to the idle upstream and a drain's. Once
	// connected, the proxy writes CheckSend (if any) and reads until the
	// reply's first len(CheckExpect) bytes have come; the upstream
	// answers only if they equal CheckExpect, within CheckTimeout of
	// the connect. Clients' own dials are not checked: their sessions
	// are watched instead (RefusedWithin). For a Bitcoin or Litecoin
	// node, CheckSend is a version message followed by a verack, and
	// CheckExpect the network's 4 magic bytes and the 12-byte command
	// "version": the node's own version message (docs/pinproxy.md has
	// the bytes). CheckSend without CheckExpect is refused.
	CheckSend   []byte
	CheckExpect []byte
	// CheckTimeout bounds the exchange after the connect. Zero means
	// DialTimeout.
	CheckTimeout time.Duration

	// RefusedWithin, RefusedBytes and RefusedSessions tell an upstream
	// that accepts TCP connections but refuses the sessions (a node that
	// banned the proxy's address, which every client behind the proxy
	// shares; one whose inbound slots are full; one still starting) from
	// one that answers. A client's session is refused when the upstream
	// ends it (its stream ended first: a FIN or a reset from the
	// upstream; a client that hangs up first never counts) within
	// RefusedWithin of the dial, having sent at most RefusedBytes to the
	// client. A session is held when it lives longer than RefusedWithin.
	// After RefusedSessions refused sessions in a row, none held since
	// the first, the upstream is refusing sessions: each refused session
	// from then on counts as a failed dial, it is tried after every
	// other upstream for FailedBackoff (then one client's session tries
	// it, as after a failed dial), and Stats, the metrics and the log
	// say so with the reason ("refusing sessions: 3 ended within 2ms").
	// It answers again once a session dialed after its last refusal is
	// held: a client's, or a test-connect's, which for an upstream that
	// refused recently holds the connection for RefusedWithin (after
	// the check's exchange, if any) to see that the upstream does not
	// end it. A rebalance round moves no connection to an upstream until
	// then.
	//
	// Zero means DefaultRefusedWithin (2 s), DefaultRefusedBytes (4 KiB)
	// and DefaultRefusedSessions (3); a negative RefusedWithin turns the
	// detection off, for upstreams that end short sessions by design.
	RefusedWithin   time.Duration
	RefusedBytes    int64
	RefusedSessions int

	// SlowStart, when positive, ramps the share of new clients of an
	// upstream that comes back up (from down) linearly over SlowStart,
	// so that it is not handed every new client at once; rebalance rounds
	// move no connection to it until its slow start is over. Zero means
	// off.
	SlowStart time.Duration

	// SendProxy, when 1 or 2, sends a PROXY protocol header of that
	// version (HAProxy's text v1 or binary v2) to each upstream before the
	// client's bytes, so that the upstream sees the client's address.
	// Zero means none.
	SendProxy int

	// LogConnections logs each connection's end at Info level rather
	// than Debug: client, upstream, duration, bytes each way, and why it
	// ended (client closed, upstream closed, rebalanced, drained, error).
	LogConnections bool

	// KeepAlive is the TCP keepalive idle time and probe interval set on
	// both the client and the upstream connection (rounded up to whole
	// seconds; the probe count is the kernel's). A listener made by
	// Proxy.Listen carries it for its clients; on another listener Serve
	// sets it on each client. Zero means DefaultKeepAlive (30 s); a
	// negative value turns keepalive off.
	//
	// On Linux, TCP_USER_TIMEOUT is set with it to the time keepalive
	// takes to find a dead peer (idle time + 9 intervals, 5 minutes by
	// default), so that a peer that died while data sent to it was
	// unacknowledged, which keepalive does not probe, is found in the same
	// time rather than when the kernel's retransmissions give up. Either
	// way the connection ends with an error, and the other side is reset.
	KeepAlive time.Duration

	// ParkAfter is how long both directions of a connection must have
	// waited, with no byte moved, before it parks. On Linux a connection
	// between two *net.TCPConn is relayed by the proxy's event loops,
	// which hold an idle one with no goroutine, stack or buffer from the
	// start: it counts as parked after ParkAfter. Any other connection is
	// copied by two goroutines, which end when it parks: its sockets wait
	// in an epoll set of the proxy's until either side sends or hangs up;
	// then a fresh goroutine copies as before. A connection parks within
	// ParkAfter of going idle. Zero means DefaultParkAfter (30 s); a
	// negative value turns parking off. Off Linux connections never park.
	ParkAfter time.Duration

	// DialContext dials an upstream. Nil means a net.Dialer with KeepAlive
	// set. Connections it returns that are not *net.TCPConn still work,
	// copied by plain io.Copy instead of the kernel's splice; a half-close
	// is carried to them only if they have a CloseWrite method.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// clock, when set (by the tests, through SetClockForTest), is the time
	// the proxy's decisions are taken at: back-off, slow start, drains,
	// Ready and the connection lines. Nil means time.Now. Timers and
	// socket deadlines run on the real clock.
	clock func() time.Time

	// goroutines, when set (by the tests: ForcedGoroutinesForTest),
	// relays connections with goroutines (copy.go), as off Linux, rather
	// than on the proxy's event loops (loop_linux.go).
	goroutines bool

	// Logger receives every decision: the upstream each client is pinned
	// to, each failover, clients closed because no upstream answered, and
	// each rebalance round's outcome. Nil means discard.
	Logger *slog.Logger
}

// A ConfigError is a Config field that New refuses: Field is the field's
// name ("MaxConns"), Value its value as text, Want what is wrong or
// wanted. A command maps Field to its flag.
type ConfigError struct {
	Field string
	Value string
	Want  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("pinproxy: Config.%s %s: %s", e.Field, e.Value, e.Want)
}

// withDefaults checks c and returns a copy with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if err := checkUpstreams(c.Upstreams); err != nil {
		return c, err
	}
	c.Upstreams = slices.Clone(c.Upstreams)
	switch {
	case c.DialTimeout < 0:
		return c, &ConfigError{Field: "DialTimeout", Value: c.DialTimeout.String(), Want: "must not be negative (0 means the default)"}
	case c.DialTimeout == 0:
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RebalanceInterval == 0 {
		c.RebalanceInterval = DefaultRebalanceInterval
	}
	if c.FailedBackoff == 0 {
		c.FailedBackoff = DefaultFailedBackoff
	}
	if c.MaxDialAttempts == 0 {
		c.MaxDialAttempts = DefaultMaxDialAttempts
	}
	if c.MaxConns < 0 {
		return c, &ConfigError{Field: "MaxConns", Value: strconv.Itoa(c.MaxConns), Want: "must not be negative (0 means no limit)"}
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.RebalanceMaxMoves < 0 {
		return c, &ConfigError{Field: "RebalanceMaxMoves", Value: strconv.Itoa(c.RebalanceMaxMoves), Want: "must not be negative (0 means 1)"}
	}
	if c.RebalanceMaxMoves == 0 {
		c.RebalanceMaxMoves = 1
	}
	if c.CheckRise < 0 {
		return c, &ConfigError{Field: "CheckRise", Value: strconv.Itoa(c.CheckRise), Want: "must not be negative (0 means the default)"}
	}
	if c.CheckFall < 0 {
		return c, &ConfigError{Field: "CheckFall", Value: strconv.Itoa(c.CheckFall), Want: "must not be negative (0 means the default)"}
	}
	if c.CheckRise == 0 {
		c.CheckRise = DefaultCheckRise
	}
	if c.CheckFall == 0 {
		c.CheckFall = DefaultCheckFall
	}
	if err := c.sessionDefaults(); err != nil {
		return c, err
	}
	if c.SendProxy < 0 || c.SendProxy > 2 {
		return c, &ConfigError{Field: "SendProxy", Value: strconv.Itoa(c.SendProxy), Want: "want 0 (off), 1 or 2"}
	}
	return c, nil
}

// sessionDefaults checks and fills the check's exchange and the refused
// sessions' thresholds.
func (c *Config) sessionDefaults() error {
	switch {
	case len(c.CheckSend) > 0 && len(c.CheckExpect) == 0:
		return &ConfigError{Field: "CheckSend", Value: fmt.Sprintf("(%d bytes)", len(c.CheckSend)), Want: "needs CheckExpect: a check must expect a reply"}
	case c.CheckTimeout < 0:
		return &ConfigError{Field: "CheckTimeout", Value: c.CheckTimeout.String(), Want: "must not be negative (0 means DialTimeout)"}
	case c.RefusedBytes < 0:
		return &ConfigError{Field: "RefusedBytes", Value: strconv.FormatInt(c.RefusedBytes, 10), Want: "must not be negative (0 means the default)"}
	case c.RefusedSessions < 0:
		return &ConfigError{Field: "RefusedSessions", Value: strconv.Itoa(c.RefusedSessions), Want: "must not be negative (0 means the default)"}
	}
	c.CheckSend, c.CheckExpect = slices.Clone(c.CheckSend), slices.Clone(c.CheckExpect)
	if c.CheckTimeout == 0 {
		c.CheckTimeout = c.DialTimeout
	}
	if c.RefusedWithin == 0 {
		c.RefusedWithin = DefaultRefusedWithin
	}
	if c.RefusedBytes == 0 {
		c.RefusedBytes = DefaultRefusedBytes
	}
	if c.RefusedSessions == 0 {
		c.RefusedSessions = DefaultRefusedSessions
	}
	return nil
}

// checkUpstreams checks a list of upstreams: at least one, each host:port,
// none twice.
func checkUpstreams(ups []string) error {
	if len(ups) == 0 {
		return ErrNoUpstreams
	}
	seen := make(map[string]int, len(ups))
	for i, addr := range ups {
		if err := checkHostPort(addr); err != nil {
			return &UpstreamError{Index: i + 1, Addr: addr, Err: err}
		}
		if j, dup := seen[addr]; dup {
			return &UpstreamError{Index: i + 1, Addr: addr, Err: listedTwice{j + 1, "upstream"}}
		}
		seen[addr] = i
	}
	return nil
}

// listedTwice is the error of an entry listed before, as entry or line also.
type listedTwice struct {
	also int
	as   string
}

func (e listedTwice) Error() string { return fmt.Sprintf("listed twice (also %s %d)", e.as, e.also) }

// ParseUpstreams reads an upstreams file: one host:port a line, in order
// of preference; blank lines and everything from a "#" on are ignored.
// A bad entry is an *UpstreamError that names its line.
func ParseUpstreams(r io.Reader) ([]string, error) {
	var ups []string
	var lines []int
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		ups = append(ups, line)
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("pinproxy: reading upstreams: %w", err)
	}
	if err := checkUpstreams(ups); err != nil {
		var ue *UpstreamError
		if errors.As(err, &ue) {
			ue.Line = lines[ue.Index-1]
			if lt, ok := ue.Err.(listedTwice); ok {
				ue.Err = listedTwice{lines[lt.also-1], "line"}
			}
		}
		return nil, err
	}
	return ups, nil
}

// checkHostPort reports what is wrong with an upstream address, if anything.
func checkHostPort(addr string) error {
	if strings.TrimSpace(addr) != addr {
		return errors.New("leading or trailing space")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err + ", want host:port")
		}
		return fmt.Errorf("want host:port: %w", err)
	}
	if host == "" {
		return errors.New("missing host, want host:port")
	}
	if strings.ContainsFunc(host, unicode.IsSpace) {
		return errors.New("host has a space in it")
	}
	// A byte-order mark from an editor, a control character or a byte
	// that is not UTF-8 would otherwise pass here and fail every dial.
	if i := strings.IndexFunc(host, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) }); i >= 0 {
		r, _ := utf8.DecodeRuneInString(host[i:])
		return fmt.Errorf("host has a character no name has (%U)", r)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("port %q: want a number from 1 to 65535", port)
	}
	return nil
}
