package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/proofkit/nodekit/internal/logbuf"
	"github.com/proofkit/nodekit/pinproxy"
)

// servePinproxy serves addr with pinproxy in front of upstreams,
// configured as cmd/pinproxy configures it by default: the listener from
// Proxy.Listen, and a text log at info level through a logbuf.Writer to
// stderr with a line for each connection's end, unless logConnections is
// false (-log-connections=false). It returns the listener and a function
// that stops it.
func servePinproxy(addr string, upstreams []string, logConnections bool, stderr io.Writer) (ln net.Listener, stop func(), err error) {
	lw := logbuf.New(stderr, logbuf.Config{})
	p, err := pinproxy.New(pinproxy.Config{
		Upstreams:      upstreams,
		LogConnections: logConnections,
		Logger:         slog.New(pinproxy.NewLogHandler(lw, slog.LevelInfo)),
	})
	if err != nil {
		lw.Close()
		return nil, nil, err
	}
	ln, err = p.Listen(context.Background(), "tcp", addr)
	if err != nil {
		lw.Close()
		return nil, nil, err
	}
	go p.Serve(ln)
	return ln, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Shutdown(ctx)
		lw.Close()
	}, nil
}
