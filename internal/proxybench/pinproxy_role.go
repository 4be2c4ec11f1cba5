package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/proofkit/nodekit/pinproxy"
)

// servePinproxy serves addr with pinproxy in front of upstreams,
// configured as cmd/pinproxy configures it by default (text log at info
// level to stderr, the listener from Proxy.Listen), and returns the
// listener and a function that stops it.
func servePinproxy(addr string, upstreams []string) (ln net.Listener, stop func(), err error) {
	p, err := pinproxy.New(pinproxy.Config{
		Upstreams: upstreams,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		return nil, nil, err
	}
	ln, err = p.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	go p.Serve(ln)
	return ln, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Shutdown(ctx)
	}, nil
}
