package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/proofkit/nodekit/pinproxy"
)

// listeners returns what the process serves: the proxy's listeners and
// the admin server's (nil without -admin), taken over from the process
// before it in an upgrade (adopted is then non-nil), passed by systemd,
// or opened here. A non-zero code is the exit status, the reason written
// to stderr.
func listeners(ctx context.Context, p *pinproxy.Proxy, o options, lookupEnv func(string) (string, bool), stderr io.Writer, log *slog.Logger) (lns []net.Listener, admin net.Listener, adopted *pinproxy.Adopted, code int) {
	src, err := handoffSource(o, lookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "pinproxy: upgrade: %v\n", err)
		return nil, nil, nil, 2
	}
	if src != nil {
		actx, cancel := context.WithTimeout(ctx, o.upgradeTimeout) // Ready, in run, waits for the commit
		adopted, err = p.Adopt(actx, src)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "pinproxy: upgrade: %v\n", err)
			return nil, nil, nil, 1
		}
		lns = adopted.Listeners
		if len(adopted.Extra) > 0 {
			admin = adopted.Extra[0]
			for _, ln := range adopted.Extra[1:] {
				ln.Close()
			}
		}
	}
	if len(lns) == 0 {
		ln, sdAdmin, err := activated(lookupEnv)
		if err != nil {
			fmt.Fprintf(stderr, "pinproxy: %v\n", err)
			return nil, nil, nil, 2
		}
		if ln != nil {
			lns = []net.Listener{ln}
			log.Info("listening on a socket from systemd", "addr", ln.Addr().String())
			if admin == nil {
				admin = sdAdmin
			} else if sdAdmin != nil {
				sdAdmin.Close()
			}
		}
	}
	if len(lns) == 0 {
		// The proxy's own listener: accepted clients come with keepalive set.
		ln, err := p.Listen(ctx, "tcp", o.listen)
		if err != nil {
			var oe *net.OpError
			if errors.As(err, &oe) {
				err = oe.Err // "bind: address already in use"
			}
			fmt.Fprintf(stderr, "pinproxy: -listen: cannot listen on %s: %v\n", o.listen, err)
			return nil, nil, nil, 2
		}
		lns = []net.Listener{ln}
	}
	if admin == nil && o.admin != "" {
		admin, err = net.Listen("tcp", o.admin)
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			fmt.Fprintf(stderr, "pinproxy: -admin: cannot listen on %s: %v\n", o.admin, errors.Unwrap(err))
			return nil, nil, nil, 2
		}
	}
	if admin != nil && o.admin == "" {
		admin.Close() // handed over, but no longer asked for
		admin = nil
	}
	return lns, admin, adopted, 0
}
