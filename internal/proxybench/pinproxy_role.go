package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/proofkit/nodekit/pinproxy"
)

// servePinproxy serves ln with pinproxy in front of upstreams, configured
// as cmd/pinproxy configures it by default (text log at info level to
// stderr), and returns a function that stops it.
func servePinproxy(ln net.Listener, upstreams []string) (stop func(), err error) {
	p, err := pinproxy.New(pinproxy.Config{
		Upstreams: upstreams,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		return nil, err
	}
	go p.Serve(ln)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Shutdown(ctx)
	}, nil
}
