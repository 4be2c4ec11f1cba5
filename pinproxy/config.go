package pinproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// Defaults for the zero values of Config.
const (
	DefaultDialTimeout       = 5 * time.Second
	DefaultRebalanceInterval = time.Minute
	DefaultFailedBackoff     = 30 * time.Second
	DefaultKeepAlive         = 30 * time.Second
	DefaultParkAfter         = 30 * time.Second
)

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

	// MaxConns caps the client connections handled at once; a client
	// accepted over the cap is closed at once. Zero means no limit.
	MaxConns int

	// KeepAlive is the TCP keepalive idle time and probe interval set on
	// both the client and the upstream connection (rounded up to whole
	// seconds; the probe count is the kernel's). A listener made by
	// Proxy.Listen carries it for its clients; on another listener Serve
	// sets it on each client. Zero means DefaultKeepAlive (30 s); a
	// negative value turns keepalive off.
	KeepAlive time.Duration

	// ParkAfter is how long both directions of a connection must have
	// waited, with no byte moved, before it parks: on Linux its two
	// goroutines end, and its sockets wait in an epoll set of the proxy's
	// with no goroutine and no buffer, until either side sends or hangs
	// up; then a fresh goroutine copies as before. A connection parks
	// within ParkAfter of going idle. Zero means DefaultParkAfter (30 s);
	// a negative value turns parking off. Off Linux connections never
	// park.
	ParkAfter time.Duration

	// DialContext dials an upstream. Nil means a net.Dialer with KeepAlive
	// set. Connections it returns that are not *net.TCPConn still work,
	// copied by plain io.Copy instead of the kernel's splice; a half-close
	// is carried to them only if they have a CloseWrite method.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// Logger receives every decision: the upstream each client is pinned
	// to, each failover, clients closed because no upstream answered, and
	// each rebalance round's outcome. Nil means discard.
	Logger *slog.Logger
}

// withDefaults checks c and returns a copy with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if len(c.Upstreams) == 0 {
		return c, errors.New("pinproxy: no upstreams: at least one host:port is required")
	}
	seen := make(map[string]int, len(c.Upstreams))
	for i, addr := range c.Upstreams {
		if err := checkHostPort(addr); err != nil {
			return c, fmt.Errorf("pinproxy: upstream %d %q: %w", i+1, addr, err)
		}
		if j, dup := seen[addr]; dup {
			return c, fmt.Errorf("pinproxy: upstream %d %q: listed twice (also upstream %d)", i+1, addr, j+1)
		}
		seen[addr] = i
	}
	switch {
	case c.DialTimeout < 0:
		return c, fmt.Errorf("pinproxy: dial timeout %v: must not be negative", c.DialTimeout)
	case c.DialTimeout == 0:
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RebalanceInterval == 0 {
		c.RebalanceInterval = DefaultRebalanceInterval
	}
	if c.FailedBackoff == 0 {
		c.FailedBackoff = DefaultFailedBackoff
	}
	if c.MaxConns < 0 {
		return c, fmt.Errorf("pinproxy: max conns %d: must not be negative (0 means no limit)", c.MaxConns)
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	return c, nil
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
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("port %q: want a number from 1 to 65535", port)
	}
	return nil
}
