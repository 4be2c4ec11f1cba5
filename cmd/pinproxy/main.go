// Command pinproxy is a TCP proxy for long-lived connections pinned to a
// few upstream nodes: each client goes to the upstream with the fewest
// live connections (ties: the one listed first), a failed dial moves on to
// the next, and once a minute a connection is moved back to a node that
// answers again. The logic is in package pinproxy; this command parses
// flags, serves, and handles signals.
//
//	pinproxy -listen 127.0.0.1:9333 -upstreams eu-01:9333,usa-01:9333 -admin 127.0.0.1:9334
//
// Instead of -upstreams, -upstreams-file names a file with one host:port a
// line ("#" starts a comment). SIGHUP re-reads it: added upstreams take
// new clients at once, removed ones take none and keep their connections
// until they close (or, -drain-removed after the reload, are moved one
// per rebalance round). A
// bad file keeps the current list and logs the line at fault. Without a
// file, SIGHUP is logged and ignored. Replace the file by rename (write
// the new list to a file beside it, then mv it over the old one): a SIGHUP
// that catches a file being written in place reads what is there so far.
// A reload that leaves fewer than half the upstreams there were is logged
// as a warning, and so is, at start and at each reload, every name that
// does not resolve (with its line).
//
// Every flag but -version can also be set in the environment as PINPROXY_
// and the flag name in capitals with "_" for "-" (PINPROXY_LISTEN,
// PINPROXY_UPSTREAMS, PINPROXY_REBALANCE_INTERVAL, ...); a flag given on
// the command line wins over the environment. PINPROXY_VERSION is left
// to deployments, which often name the release to run with it.
//
// -max-conns defaults to what the open-file limit (RLIMIT_NOFILE) allows:
// two descriptors a client, and a reserve for the admin server and the
// checks; the start-up line says the figure. -max-conns 0 means no limit.
//
// With -admin, it serves Prometheus metrics on /metrics, each upstream's
// state (live connections, dials, failures, up/down/unknown) as JSON on
// /status, /healthz (200 while the process serves) and /readyz (200 while
// it listens and at least one upstream is up; with -check-interval 0 an
// upstream whose dial failed counts as down for the 30 s back-off only,
// since nothing but a client would try it again).
//
// Exit status: 0 after SIGTERM or SIGINT, once the live connections have
// closed or -shutdown-timeout has passed (then they are closed; a second
// SIGTERM or SIGINT closes them at once); 2 for a bad flag or environment
// value, or an address it cannot listen on, with one line on stderr
// saying which; 1 if serving fails later.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/proofkit/nodekit/internal/buildinfo"
	"github.com/proofkit/nodekit/internal/cmdkit"
	"github.com/proofkit/nodekit/internal/logbuf"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/handover"
	"github.com/proofkit/nodekit/pinproxy/pinproxymetrics"
)

func main() {
	sigs := make(chan os.Signal, 4)
	handled := []os.Signal{syscall.SIGTERM, os.Interrupt, syscall.SIGHUP}
	if upgradeSignal != nil {
		handled = append(handled, upgradeSignal)
	}
	signal.Notify(sigs, handled...)
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, sigs))
}

// run is the whole command; it returns the exit status. sigs delivers
// SIGTERM, SIGINT and SIGHUP (and SIGUSR2 on Linux), through
// signal.Notify (an upgrade by exec stops its SIGHUP for a moment: see
// upgradeByExec).
func run(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer, sigs chan os.Signal) int {
	o, err := parseFlags(args, lookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "pinproxy: %v\n", err)
		return 2
	}
	bi := buildinfo.Read()
	if o.version {
		fmt.Fprintf(stdout, "pinproxy %s\n", bi)
		return 0
	}
	// Log lines go through a buffer written out every 100 ms, so a
	// connection's line costs no write(2) of its own; a crash loses at
	// most that interval.
	lw := logbuf.New(stderr, logbuf.Config{})
	defer lw.CloseWithin(logGrace)
	log := newLogger(lw, o.logFormat == "json", o.logLevel)
	environ := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, handoffEnv+"=") })
	cmdkit.WarnUnknownEnv(log, flagSet(&options{}), envPrefix, environ)

	p, err := pinproxy.New(o.config(log))
	if err != nil {
		fmt.Fprintf(stderr, "pinproxy: %v\n", configError(err, o))
		return 2
	}
	lns, adminLn, adopted, code := listeners(context.Background(), p, o, lookupEnv, stderr, log)
	if code != 0 {
		return code
	}
	d := &daemon{o: o, p: p, log: log, flushLog: func() { lw.FlushWithin(logGrace) }, adminLn: adminLn, served: make(chan error, len(lns)+1), lookupEnv: lookupEnv}
	if adminLn != nil {
		d.admin = newAdminServer(p, bi, log, lw)
		d.extra = []net.Listener{adminLn}
	}
	if adopted == nil {
		d.serveAdmin()
	}
	d.serve(lns, bi)
	if adopted != nil {
		// Nothing adopted is used before the old process commits: then
		// the connections copy, the listeners accept, and the admin
		// server answers here.
		rctx, cancel := context.WithTimeout(context.Background(), o.upgradeTimeout)
		err := adopted.Ready(rctx)
		cancel()
		if err != nil {
			log.Error("upgrade: the old process did not commit; it serves on, and this one stops", "err", err)
			return 1
		}
		d.serveAdmin()
	}
	notifyReady(lookupEnv, adopted != nil, log)
	d.upgrades = make(chan *handover.Peer)
	d.stopUpgrades = listenUpgrades(o.upgradeSocket, d.upgrades, log)
	defer func() { d.stopUpgrades() }()
	code, upgraded := d.wait(sigs)
	if upgraded {
		return d.handedOver()
	}
	d.drain(sigs)
	log.Info("pinproxy stopped", "moves", p.Totals().Moves)
	return code
}

// newLogger is the command's logger: text through pinproxy's handler,
// whose connection lines the proxy writes itself without allocating (the
// same bytes as slog's text handler), or JSON as the agent logs it.
func newLogger(w io.Writer, json bool, level slog.Level) *slog.Logger {
	if json {
		return cmdkit.NewLogger(w, true, level)
	}
	return slog.New(pinproxy.NewLogHandler(w, level))
}

// logGrace bounds each wait for the log's output: before a hand-over and
// at the exit. A stderr that does not drain (a journald that is not
// reading) then costs log lines, never a hand-over or the exit.
const logGrace = 250 * time.Millisecond

// daemon is the running command: the proxy, its admin server and the
// upgrades it listens for.
type daemon struct {
	o   options
	p   *pinproxy.Proxy
	log *slog.Logger
	// flushLog writes out the log lines buffered so far: before a
	// hand-over, so that the old process's lines come before the new
	// one's, and once it is committed.
	flushLog func()
	admin    *adminServer // nil without -admin
	adminLn  net.Listener
	extra    []net.Listener // handed over beside the proxy's: the admin's
	served   chan error     // a Serve that returned

	upgrades     chan *handover.Peer
	stopUpgrades func()
	lookupEnv    func(string) (string, bool) // for NOTIFY_SOCKET; nil: none
}

// serve starts serving lns, and logs the start-up lines.
func (d *daemon) serve(lns []net.Listener, bi buildinfo.Info) {
	o, log := d.o, d.log
	for _, ln := range lns {
		go func() { d.served <- d.p.Serve(ln) }()
	}
	go warnUnresolved(o.upstreamsFile, o.upstreams, net.DefaultResolver, log)
	log.Info("pinproxy listening", "addr", lns[0].Addr().String(), "version", bi.Version, "commit", bi.Commit,
		"upstreams", strings.Join(o.upstreams, ","), "upstreams_file", o.upstreamsFile,
		"rebalance_interval", o.rebalanceInterval, "dial_timeout", o.dialTimeout,
		"max_conns", o.maxConns, "max_conns_from", o.maxConnsFrom, "check_interval", o.checkInterval)
	if n, ok := fileLimit(); ok && o.maxConnsFrom == "-max-conns" && o.maxConns > pinproxy.MaxConnsForFiles(n) {
		log.Warn("-max-conns is more than the open-file limit allows: past it, the listeners pause until a client ends",
			"max_conns", o.maxConns, "rlimit_nofile", n, "fits", pinproxy.MaxConnsForFiles(n))
	}
}

// serveAdmin starts the admin server, if there is one.
func (d *daemon) serveAdmin() {
	if d.admin != nil {
		go func() { d.served <- d.admin.Serve(d.adminLn) }()
		d.log.Info("admin listening", "addr", d.adminLn.Addr().String(), "paths", strings.Join(d.admin.paths, " "))
	}
}

// wait serves until a signal to stop, a hand-over to a new process
// (upgraded), or a Serve that fails (code 1). SIGUSR2s that arrived
// while this process was taking over, or during a hand-over of its own,
// are part of that hand-over: they are dropped (coalesced), never the
// start of another one.
func (d *daemon) wait(sigs chan os.Signal) (code int, upgraded bool) {
	pending := d.coalesce(sigs, nil)
	for {
		var sig os.Signal
		if len(pending) > 0 {
			sig, pending = pending[0], pending[1:]
		} else {
			select {
			case sig = <-sigs:
			case peer := <-d.upgrades:
				d.flushLog()
				if res := d.handOff(peer); res.Committed {
					notifyMainPID(d.lookupEnv, res.NewPID, d.log)
					d.flushLog()
					return 0, true
				}
				pending = d.coalesce(sigs, pending)
				continue
			case err := <-d.served:
				d.log.Error("serving failed", "err", err)
				return 1, false
			}
		}
		switch sig {
		case syscall.SIGHUP:
			reload(d.p, d.o.upstreamsFile, d.log)
			continue
		case upgradeSignal:
			d.stopUpgrades()
			d.flushLog()
			if res := upgradeByExec(d.p, d.o.upgradeTimeout, d.extra, sigs, d.log); res.Committed {
				notifyMainPID(d.lookupEnv, res.NewPID, d.log)
				d.flushLog()
				return 0, true
			}
			d.stopUpgrades = listenUpgrades(d.o.upgradeSocket, d.upgrades, d.log)
			pending = d.coalesce(sigs, pending)
			continue
		}
		d.log.Info("signal received; draining", "signal", sig.String(), "live", d.p.Totals().Live, "timeout", d.o.shutdownTimeout)
		return 0, false
	}
}

// coalesce takes the signals queued so far, drops the upgrade signals
// among them (a hand-over just ran, or this process just took over) and
// appends the others to pending.
func (d *daemon) coalesce(sigs <-chan os.Signal, pending []os.Signal) []os.Signal {
	for {
		select {
		case sig := <-sigs:
			if sig == upgradeSignal && upgradeSignal != nil {
				d.log.Info("upgrade signal during a hand-over; coalesced into it", "signal", sig.String())
				continue
			}
			pending = append(pending, sig)
		default:
			return pending
		}
	}
}

// handOff hands everything to the process connected to -upgrade-socket,
// and says whether it took it; if not, it listens for upgrades again.
func (d *daemon) handOff(peer *handover.Peer) pinproxy.HandoffResult {
	d.stopUpgrades()
	d.log.Info("upgrade: a process connected to -upgrade-socket; handing over", "upgrade_socket", d.o.upgradeSocket)
	uctx, ucancel := context.WithTimeoutCause(context.Background(), d.o.upgradeTimeout,
		fmt.Errorf("the new process was not ready within -upgrade-timeout %v", d.o.upgradeTimeout))
	res, _ := d.p.Handoff(uctx, peer, d.extra...)
	ucancel()
	if !res.Committed {
		d.stopUpgrades = listenUpgrades(d.o.upgradeSocket, d.upgrades, d.log)
	}
	return res
}

// handedOver stops the admin server once the new process has it all; it
// returns the exit status.
func (d *daemon) handedOver() int {
	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	d.p.Shutdown(sctx) // holds nothing now; this ends its log lines' goroutine
	scancel()
	d.stopAdmin()
	d.log.Info("pinproxy stopped: upgraded", "pid", os.Getpid())
	return 0
}

// drain shuts the proxy down within -shutdown-timeout, or at once on a
// second SIGTERM or SIGINT, then the admin server.
func (d *daemon) drain(sigs <-chan os.Signal) {
	sctx, cancel := context.WithTimeout(context.Background(), d.o.shutdownTimeout)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- d.p.Shutdown(sctx) }()
	for {
		select {
		case <-drained: // a drain that ran out of time is logged by Shutdown, once
			d.stopAdmin()
			return
		case sig := <-sigs:
			if sig == syscall.SIGHUP || sig == upgradeSignal {
				d.log.Info("signal during the drain; ignored", "signal", sig.String())
				continue
			}
			d.log.Info("second signal; closing the connections left now", "signal", sig.String())
			cancel()
		}
	}
}

// stopAdmin shuts the admin server down, if there is one, within 5 s.
func (d *daemon) stopAdmin() {
	if d.admin == nil {
		return
	}
	actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
	d.admin.Shutdown(actx)
	acancel()
}

// reload re-reads the upstreams file into p. A bad file keeps the current
// list; either way it logs one line.
func reload(p *pinproxy.Proxy, path string, log *slog.Logger) {
	if path == "" {
		log.Warn("SIGHUP without -upstreams-file; nothing to reload, ignored")
		return
	}
	ups, err := readUpstreams("-upstreams-file", path)
	if err == nil {
		before := 0
		for _, s := range p.Stats() {
			if !s.Removed {
				before++
			}
		}
		if 2*len(ups) < before {
			log.Warn("upstreams file shrank by more than half; check it was written whole and renamed into place",
				"file", path, "upstreams", len(ups), "before", before)
		}
		err = p.SetUpstreams(ups) // logs the new list
	}
	if err != nil {
		log.Error("reload failed; keeping the current upstreams", "err", err)
		return
	}
	go warnUnresolved(path, ups, net.DefaultResolver, log)
}

// warnUnresolved looks up the host of every upstream that is not an IP
// address, a few at a time, and logs a warning for each that does not
// resolve, naming its line in the upstreams file path ("" for the
// -upstreams flag). It is only a warning: a name may resolve later, and the
// proxy resolves at each dial. Each lookup is bounded by 5 s.
func warnUnresolved(path string, ups []string, r *net.Resolver, log *slog.Logger) {
	lines := map[string]int{}
	if path != "" {
		if b, err := os.ReadFile(path); err == nil {
			for i, l := range strings.Split(string(b), "\n") {
				l, _, _ = strings.Cut(l, "#")
				if l = strings.TrimSpace(l); l != "" && lines[l] == 0 {
					lines[l] = i + 1
				}
			}
		}
	}
	const parallel = 8
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, u := range ups {
		host, _, err := net.SplitHostPort(u)
		if err != nil || net.ParseIP(host) != nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := r.LookupHost(ctx, host); err != nil {
				attrs := []any{"upstream", u, "err", err}
				if path != "" {
					attrs = append([]any{"file", path, "line", lines[u]}, attrs...)
				}
				log.Warn("upstream does not resolve", attrs...)
			}
		})
	}
	wg.Wait()
}

// adminServer is the admin HTTP server and the paths it serves, for the
// start-up line.
type adminServer struct {
	*http.Server
	paths []string
}

// newAdminServer serves /metrics (Prometheus, from a registry of its own),
// /status (JSON), /healthz and /readyz, with timeouts that close idle and
// slow connections: the admin port shares the proxy's file descriptors.
func newAdminServer(p *pinproxy.Proxy, bi buildinfo.Info, log *slog.Logger, lw *logbuf.Writer) *adminServer {
	var adminPaths []string
	reg := prometheus.NewRegistry()
	reg.MustRegister(pinproxymetrics.NewCollector(p))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "pinproxy_log_lines_dropped_total",
		Help: "Log lines dropped because the log's output (stderr) did not keep up; the proxy never waits for it.",
	}, func() float64 { return float64(lw.Dropped()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "pinproxy_build_info",
		Help:        "Always 1; the labels say the version, commit and Go version of the running pinproxy.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "commit": bi.Commit, "goversion": bi.GoVersion},
	}, func() float64 { return 1 }))
	mux := http.NewServeMux()
	handle := func(path string, h http.HandlerFunc) {
		mux.Handle("GET "+path, h)
		adminPaths = append(adminPaths, path)
	}
	handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP)
	handle("/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			Version   string                   `json:"version"`
			Upstreams []pinproxy.UpstreamStats `json:"upstreams"`
			Totals    pinproxy.Totals          `json:"totals"`
		}{bi.Version, p.Stats(), p.Totals()})
	})
	handle("/healthz", cmdkit.Probe(func() error { return nil }))
	handle("/readyz", cmdkit.Probe(p.Ready))
	return &adminServer{paths: adminPaths, Server: cmdkit.NewServer(mux, log)}
}
