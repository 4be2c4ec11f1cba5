// Package pinproxy is a TCP proxy for long-lived connections pinned to a
// few upstream nodes, such as an MWEB light client's P2P connections to
// Litecoin nodes.
//
// Each accepted client connection goes to the upstream with the fewest live
// connections; ties go to the upstream listed first. Upstream addresses are
// host:port and are resolved at each dial. A dial that fails moves on to the
// next upstream in that order, and an upstream that just failed is tried
// last for a while (Config.FailedBackoff). When every upstream fails, the
// client is closed.
//
// Because the connections are long-lived, a node that was down while its
// clients connected elsewhere would stay empty once it is back. So once a
// minute (Config.RebalanceInterval) the proxy runs a rebalance round: if one
// upstream holds at least two connections more than another (two or more
// against none is the case that matters), it test-connects to the idle
// upstream a redial would go to; if that answers, it closes the busiest
// upstream's newest connection, and the client's redial goes, least-used
// first, to the idle node. With several idle nodes still down, successive
// rounds take turns among them. While the idle node does not answer nothing is closed, at most
// one connection is closed per round, and with an even spread the round
// makes no connection at all.
//
// Between two *net.TCPConn bulk bytes move with splice(2) in the kernel;
// bursts of up to 16 KiB move with one read and one write. On Linux the
// established connections are relayed by the proxy's event loops, one per
// GOMAXPROCS, as HAProxy relays (loop_linux.go): an idle connection holds
// its two sockets and a small record, no goroutine, buffer or splice pipe;
// elsewhere two goroutines copy each (copy.go); a half-close is carried
// through, and TCP keepalive (with TCP_USER_TIMEOUT on Linux) is on for
// both sides. An error on one side (a reset, a keepalive or user timeout)
// ends in a reset on the other, so a broken stream never reaches the
// other peer as a clean end.
//
// A TCP connect says only that an upstream's kernel answered. A node that
// accepts the connection and then ends the session (a ban of the proxy's
// address, which every client behind the proxy shares; full inbound
// slots) is refusing sessions once it has ended a few in a row soon after
// the dial (Config.RefusedWithin): it is tried last, and no rebalance
// round moves a connection to it until it holds a session again.
// Test-connects can run an application-level exchange (Config.CheckSend,
// CheckExpect), such as a Bitcoin node's version/verack. Every decision is logged through the
// Config.Logger, for example
//
//	level=INFO msg="answers again; moving a connection" from=usa-01:9333 to=eu-01:9333
//
// Usage:
//
//	p, err := pinproxy.New(pinproxy.Config{
//		Upstreams: []string{"eu-01:9333", "usa-01:9333"},
//		Logger:    slog.Default(),
//	})
//	if err != nil {
//		return err
//	}
//	// Listen (rather than net.Listen) sets TCP keepalive once, on the
//	// listening socket, instead of on each accepted client.
//	ln, err := p.Listen(ctx, "tcp", "127.0.0.1:9333")
//	if err != nil {
//		return err
//	}
//	go p.Serve(ln) // returns ErrProxyClosed after Shutdown
//	...
//	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	err = p.Shutdown(ctx) // stop accepting, drain, then close what is left
//
// For running beside HAProxy, each off by default: SetUpstreams replaces
// the list without dropping a connection (a reload; ParseUpstreams reads
// a file of them); active health checks (Config.CheckInterval, CheckRise,
// CheckFall); slow start for a returning upstream (Config.SlowStart);
// more than one move per round (Config.RebalanceMaxMoves); a PROXY
// protocol header to upstreams (Config.SendProxy); and a log line per
// connection at Info (Config.LogConnections), formatted by a goroutine of
// the proxy's own so that it costs the connection almost nothing (give the
// Logger a writer that does not block, as cmd/pinproxy does). A client
// tries at most Config.MaxDialAttempts upstreams. Running out of file
// descriptors or memory never counts against an upstream;
// MaxConnsForFiles gives a MaxConns that leaves room for them.
//
// Upgrades (Linux): Handoff passes the listeners and every established
// connection, with its counters, half-close and park state and the bytes
// it had read but not yet written, to a proxy in another process, which
// takes them with Adopt, over a Unix socket (SCM_RIGHTS; the protocol and
// re-exec are in the subpackage handover); no connection is closed, and
// until the new process serves, the old one can take everything back,
// and does if the new one fails, stalls or is not ready in time.
// cmd/pinproxy does this on SIGUSR2:
//
//	peer, err := handover.Exec("MYSERVER_HANDOVER_FD")       // in the old process
//	res, err := old.Handoff(ctx, peer, adminListener)
//
//	peer, err := handover.Inherited("MYSERVER_HANDOVER_FD") // in the new one
//	a, err := p.Adopt(ctx, peer)
//	for _, ln := range a.Listeners {
//		go p.Serve(ln) // waits for the commit
//	}
//	err = a.Ready(ctx) // the old process commits; everything starts here
//
// Metrics for Prometheus are in the subpackage pinproxymetrics, which keeps
// the Prometheus client out of programs that embed the proxy without it.
// The subpackage pinproxytest has loopback upstreams that go down and come
// back, and clients that redial, for testing programs built on the proxy.
package pinproxy
