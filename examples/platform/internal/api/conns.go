package api

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds on the HTTP server: a client that sends its request's header
// slowly holds a connection for ReadHeaderTimeout at most, and a header
// is at most maxHeaderBytes.
const (
	ReadHeaderTimeout = 5 * time.Second
	maxHeaderBytes    = 64 << 10
)

// Over the connection cap a few connections more are taken, each for
// overCapFor at most, to answer GET /healthz (200) and everything else
// 503 "unavailable"; past those a new connection is closed at once.
const (
	overCapSpare = 16
	overCapFor   = 2 * time.Second
)

// MaxConnsForFiles is the default -max-conns for an open-file limit of
// nofile: each connection takes one descriptor, and a reserve of a tenth
// of the limit, at least 64, is left for the listener, the database's
// connections, the state files and the logs, beside the spare
// connections over the cap. It returns at least 1.
func MaxConnsForFiles(nofile uint64) int {
	reserve := max(nofile/10, 64) + overCapSpare
	if nofile <= reserve+1 {
		return 1
	}
	return int(min(nofile-reserve, 1<<30))
}

// capListener hands the HTTP server at most max connections at once (0:
// no limit), then up to overCapSpare more marked over the cap, and closes
// the rest as it accepts them.
type capListener struct {
	net.Listener
	max    int
	log    *slog.Logger
	live   chan struct{} // a token per connection under the cap
	spare  chan struct{} // a token per connection over it
	closed atomic.Int64  // connections closed at once, for the log
	logged atomic.Int64  // unix seconds of the last "at the cap" warning
}

// NewCapListener is ln, handing the HTTP server at most max connections
// at once (capListener); it logs through log when it is at the cap.
func NewCapListener(ln net.Listener, max int, log *slog.Logger) net.Listener {
	l := &capListener{Listener: ln, max: max, log: log, spare: make(chan struct{}, overCapSpare)}
	if max > 0 {
		l.live = make(chan struct{}, max)
	}
	return l
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.live == nil {
			return c, err
		}
		select {
		case l.live <- struct{}{}:
			return &cappedConn{Conn: c, tokens: l.live}, nil
		default:
		}
		select {
		case l.spare <- struct{}{}:
			hard := time.Now().Add(overCapFor)
			c.SetDeadline(hard)
			return &cappedConn{Conn: c, tokens: l.spare, overCap: true, hard: hard}, nil
		default:
		}
		c.Close()
		n := l.closed.Add(1)
		// One warning a second at most, with the count since the last.
		if now := time.Now().Unix(); l.logged.Load() != now && l.logged.Swap(now) != now {
			l.log.Warn("at the connection cap: closing new connections", "max_conns", l.max, "closed", n)
			l.closed.Add(-n)
		}
	}
}

// cappedConn is a connection counted against the cap; closing it frees
// its place. One over the cap never waits past hard, whatever deadline
// the server sets.
type cappedConn struct {
	net.Conn
	tokens  chan struct{}
	overCap bool
	hard    time.Time
	once    sync.Once
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.tokens })
	return err
}

// CloseWrite passes a half-close on, as the server does for a plain TCP
// connection before it closes one whose request it did not read whole.
func (c *cappedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *cappedConn) clamp(t time.Time) time.Time {
	if c.overCap && (t.IsZero() || t.After(c.hard)) {
		return c.hard
	}
	return t
}

func (c *cappedConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *cappedConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.clamp(t)) }
func (c *cappedConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.clamp(t)) }

type overCapKey struct{}

// NewServer is the HTTP server of h as the platform runs it: h behind
// the connection cap max (atCap, with connContext marking the
// connections over it), its read, write and idle timeouts, its bound on
// a request's header, and its own errors logged through log at warning
// level.
func NewServer(h http.Handler, max int, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           atCap(h, max),
		ConnContext:       connContext,
		ReadHeaderTimeout: ReadHeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// connContext marks the requests of a connection over the cap.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*cappedConn); ok && cc.overCap {
		return context.WithValue(ctx, overCapKey{}, true)
	}
	return ctx
}

// atCap answers a request on a connection over the cap: GET /healthz as
// ever, anything else 503 "unavailable"; either way the connection is
// closed after it.
func atCap(h http.Handler, max int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(overCapKey{}) == nil {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, ReasonUnavailable,
			fmt.Errorf("at the connection cap (%d connections, -max-conns): try again shortly", max))
	})
}
