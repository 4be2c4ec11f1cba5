package cmdkit

import (
	"log/slog"
	"net/http"
	"time"
)

// Timeouts of the servers NewServer makes: a client that sends its
// headers slowly, or never reads its answer, holds a connection for a
// bounded time; an idle keep-alive connection is closed within two
// minutes.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = 30 * time.Second
	IdleTimeout       = time.Minute
	MaxHeaderBytes    = 16 << 10
)

// NewServer returns the HTTP server both binaries serve their endpoints
// with: h, the timeouts above, and the server's own errors (a client's
// bad TLS, an accept error) logged at warn level to log.
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// Probe is the handler of a /healthz or /readyz: 200 "ok" while check
// returns nil, else 503 with the error's text, one line, never cached.
func Probe(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(err.Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}
}
