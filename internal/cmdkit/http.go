package cmdkit

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
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

// Healthcheck asks the process serving at listen for /healthz, within 5 s,
// for a container's HEALTHCHECK: it writes the answer's body to stdout and
// returns 0 for a 200; otherwise it writes why to stderr, each line
// starting "name: healthcheck: ", and returns 1. A wildcard listen address
// (":8080", "0.0.0.0:8080") is asked on loopback.
func Healthcheck(name, listen string, stdout, stderr io.Writer) int {
	host, port, _ := net.SplitHostPort(listen)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // a wildcard listen answers on loopback too
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(host, port) + "/healthz")
	if err != nil {
		fmt.Fprintf(stderr, "%s: healthcheck: %v\n", name, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "%s: healthcheck: %s: %s\n", name, resp.Status, strings.TrimSpace(string(body)))
		return 1
	}
	fmt.Fprintf(stdout, "%s", body)
	return 0
}
