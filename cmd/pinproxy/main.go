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
	"strconv"
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
	"github.com/proofkit/nodekit/pinproxy/pinproxymetrics"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt, syscall.SIGHUP)
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, sigs))
}

// envPrefix is the environment variables' prefix: -dial-timeout is
// PINPROXY_DIAL_TIMEOUT.
const envPrefix = "PINPROXY_"

// options are the parsed flags.
type options struct {
	listen            string
	upstreams         []string
	upstreamsFile     string
	rebalanceInterval time.Duration
	rebalanceMaxMoves int
	drainRemoved      time.Duration
	dialTimeout       time.Duration
	maxDialAttempts   int
	checkInterval     time.Duration
	checkRise         int
	checkFall         int
	slowStart         time.Duration
	parkAfter         time.Duration
	sendProxy         int
	maxConns          int
	maxConnsFrom      string // what set maxConns: "-max-conns" or the open-file limit
	admin             string
	logFormat         string
	logLevel          slog.Level
	logConnections    bool
	shutdownTimeout   time.Duration
	version           bool
	fromEnv           map[string]bool // flags set from the environment, not the command line
}

// usageError is a bad flag or environment value: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func parseFlags(args []string, lookupEnv func(string) (string, bool), stderr io.Writer) (o options, err error) {
	fs := flag.NewFlagSet("pinproxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.listen, "listen", "", "address to accept clients on, host:port (required)")
	upstreams := fs.String("upstreams", "", "upstreams in order of preference, host:port,host:port (this or -upstreams-file)")
	fs.StringVar(&o.upstreamsFile, "upstreams-file", "", "file of upstreams, one host:port a line, # comments; SIGHUP re-reads it")
	fs.DurationVar(&o.rebalanceInterval, "rebalance-interval", pinproxy.DefaultRebalanceInterval, "time between rebalance rounds (0 turns them off)")
	fs.IntVar(&o.rebalanceMaxMoves, "rebalance-max-moves", 1, "most connections a rebalance round moves")
	fs.DurationVar(&o.drainRemoved, "drain-removed", 0, "this long after a reload removed an upstream, move its connections, one per rebalance round (0: leave them)")
	fs.DurationVar(&o.dialTimeout, "dial-timeout", pinproxy.DefaultDialTimeout, "bound on each dial to an upstream")
	fs.IntVar(&o.maxDialAttempts, "max-dial-attempts", pinproxy.DefaultMaxDialAttempts, "most upstreams a client's dials try before the client is closed (negative: every upstream)")
	fs.DurationVar(&o.checkInterval, "check-interval", 0, "time between active health checks, TCP connects (0: off, health from clients' dials)")
	fs.IntVar(&o.checkRise, "check-rise", pinproxy.DefaultCheckRise, "checks in a row that must answer to mark a down upstream up")
	fs.IntVar(&o.checkFall, "check-fall", pinproxy.DefaultCheckFall, "checks in a row that must fail to mark an upstream down")
	fs.DurationVar(&o.slowStart, "slow-start", 0, "ramp a returning upstream's share of new clients over this time (0: off)")
	o.parkAfter = pinproxy.DefaultParkAfter
	fs.Var((*orNever)(&o.parkAfter), "park-after", "park a connection idle both ways for this `duration`: no goroutine, no buffer (Linux; never, or negative such as -1: never)")
	sendProxy := fs.String("send-proxy", "", "send a PROXY protocol header to upstreams: v1 or v2 (default: none)")
	fs.IntVar(&o.maxConns, "max-conns", 0, "most client connections at once; over it a new client is closed at once (0: no limit; default: from the open-file limit)")
	fs.StringVar(&o.admin, "admin", "", "address for /metrics, /status, /healthz and /readyz, host:port (default: off)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&o.logConnections, "log-connections", true, "log each connection's end at info level (false: at debug)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long to wait for live connections before closing them")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "usage: pinproxy -listen host:port -upstreams host:port[,host:port...] [flags]\n\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			fmt.Fprintf(stderr, "\nEach flag but -version may be set in the environment as %sNAME (e.g. %s); flags win.\n",
				envPrefix, cmdkit.EnvName(envPrefix, "upstreams"))
			return o, err
		}
		return o, usageError{err.Error() + hint(fs, err.Error())}
	}
	if fs.NArg() > 0 {
		return o, usageError{fmt.Sprintf("unexpected argument %q (flags only)", fs.Arg(0))}
	}
	if o.version {
		return o, nil
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	// The environment fills in the flags not given on the command line,
	// all but -version (see cmdkit.FromEnv).
	if err := cmdkit.FromEnv(fs, envPrefix, lookupEnv); err != nil {
		msg := err.Error()
		if strings.Contains(msg, "parse error") {
			var name string // the flag the variable is for
			fs.VisitAll(func(f *flag.Flag) {
				if strings.HasPrefix(msg, cmdkit.EnvName(envPrefix, f.Name)+"=") {
					name = f.Name
				}
			})
			msg += hint(fs, "flag -"+name+": parse error")
		}
		return o, usageError{msg}
	}
	// One of -upstreams and -upstreams-file given on the command line
	// wins over the other from the environment.
	switch {
	case given["upstreams"] && !given["upstreams-file"]:
		o.upstreamsFile = ""
	case given["upstreams-file"] && !given["upstreams"]:
		*upstreams = ""
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true }) // the command line or the environment
	o.fromEnv = map[string]bool{}
	for name := range set {
		if !given[name] {
			o.fromEnv[name] = true
		}
	}
	// A bad value from the environment is named as such: the operator
	// did not type "-max-conns -1", the unit or container set it.
	defer func() {
		var ue usageError
		if errors.As(err, &ue) {
			err = usageError{o.fromEnvPrefix(ue.msg) + ue.msg}
		}
	}()

	if o.listen == "" {
		return o, usageError{"-listen is required (or PINPROXY_LISTEN): the host:port to accept clients on"}
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return o, usageError{fmt.Sprintf("-listen %q: want host:port", o.listen)}
	}
	switch {
	case o.upstreamsFile != "" && strings.TrimSpace(*upstreams) != "":
		return o, usageError{"-upstreams and -upstreams-file: give one, not both"}
	case o.upstreamsFile != "":
		ups, err := readUpstreams(o.upstreamsFile)
		if err != nil {
			return o, usageError{err.Error()}
		}
		o.upstreams = ups
	case strings.TrimSpace(*upstreams) == "":
		return o, usageError{"-upstreams is required (or PINPROXY_UPSTREAMS, or -upstreams-file): at least one host:port"}
	default:
		for i, u := range strings.Split(*upstreams, ",") {
			u = strings.TrimSpace(u)
			if u == "" {
				return o, usageError{fmt.Sprintf("-upstreams %q: entry %d is empty", *upstreams, i+1)}
			}
			o.upstreams = append(o.upstreams, u)
		}
	}
	if o.rebalanceInterval < 0 {
		return o, usageError{fmt.Sprintf("-rebalance-interval %v: must not be negative (0 turns rounds off)", o.rebalanceInterval)}
	}
	if o.rebalanceMaxMoves < 1 {
		return o, usageError{fmt.Sprintf("-rebalance-max-moves %d: must be at least 1", o.rebalanceMaxMoves)}
	}
	if o.drainRemoved < 0 {
		return o, usageError{fmt.Sprintf("-drain-removed %v: must not be negative (0: leave removed upstreams' connections)", o.drainRemoved)}
	}
	if o.dialTimeout <= 0 {
		return o, usageError{fmt.Sprintf("-dial-timeout %v: must be positive", o.dialTimeout)}
	}
	if o.maxDialAttempts == 0 {
		return o, usageError{"-max-dial-attempts 0: give how many upstreams a client may try, or a negative number for every one"}
	}
	if o.checkInterval < 0 {
		return o, usageError{fmt.Sprintf("-check-interval %v: must not be negative (0: off)", o.checkInterval)}
	}
	if o.checkRise < 1 || o.checkFall < 1 {
		return o, usageError{fmt.Sprintf("-check-rise %d, -check-fall %d: must be at least 1", o.checkRise, o.checkFall)}
	}
	if o.parkAfter == 0 {
		return o, usageError{"-park-after 0: give how long a connection waits before it parks, or a negative duration for never"}
	}
	if o.slowStart < 0 {
		return o, usageError{fmt.Sprintf("-slow-start %v: must not be negative (0: off)", o.slowStart)}
	}
	switch *sendProxy {
	case "":
	case "v1":
		o.sendProxy = 1
	case "v2":
		o.sendProxy = 2
	default:
		return o, usageError{fmt.Sprintf("-send-proxy %q: want v1 or v2", *sendProxy)}
	}
	if o.maxConns < 0 {
		return o, usageError{fmt.Sprintf("-max-conns %d: must not be negative (0: no limit)", o.maxConns)}
	}
	o.maxConnsFrom = "-max-conns"
	if !set["max-conns"] {
		if n, ok := fileLimit(); ok {
			o.maxConns = pinproxy.MaxConnsForFiles(n)
			o.maxConnsFrom = fmt.Sprintf("RLIMIT_NOFILE %d", n)
		}
	}
	if o.admin != "" {
		if _, _, err := net.SplitHostPort(o.admin); err != nil {
			return o, usageError{fmt.Sprintf("-admin %q: want host:port", o.admin)}
		}
	}
	level, err := cmdkit.ParseLogFlags(o.logFormat, *logLevel)
	if err != nil {
		return o, usageError{err.Error()}
	}
	o.logLevel = level
	if o.shutdownTimeout < 0 {
		return o, usageError{fmt.Sprintf("-shutdown-timeout %v: must not be negative", o.shutdownTimeout)}
	}
	return o, nil
}

// orNever is a duration flag that also takes "never" or a negative whole
// number without a unit ("-1"), both meaning never (a negative duration).
type orNever time.Duration

func (d *orNever) String() string { return time.Duration(*d).String() }

func (d *orNever) Get() any { return time.Duration(*d) }

func (d *orNever) Set(s string) error {
	if s == "never" {
		*d = -1
		return nil
	}
	if n, err := strconv.Atoi(s); err == nil && n < 0 {
		*d = -1
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("parse error")
	}
	*d = orNever(v)
	return nil
}

// fromEnvPrefix returns "PINPROXY_NAME: " when msg is about the flag
// -NAME ("-NAME ..." or "-NAME: ...") and its value came from the
// environment; else "".
func (o options) fromEnvPrefix(msg string) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(msg, "-"), " ")
	name = strings.TrimSuffix(name, ":")
	if !strings.HasPrefix(msg, "-") || !o.fromEnv[name] {
		return ""
	}
	return cmdkit.EnvName(envPrefix, name) + ": "
}

// readUpstreams reads an upstreams file; the error names the file and,
// for a bad entry, its line.
func readUpstreams(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-upstreams-file: %w", err)
	}
	defer f.Close()
	ups, err := pinproxy.ParseUpstreams(f)
	var ue *pinproxy.UpstreamError
	switch {
	case errors.As(err, &ue):
		return nil, fmt.Errorf("-upstreams-file %s: %s", path, ue.Detail())
	case errors.Is(err, pinproxy.ErrNoUpstreams):
		return nil, fmt.Errorf("-upstreams-file %s: no upstreams in it: at least one host:port line is required", path)
	case err != nil:
		return nil, fmt.Errorf("-upstreams-file %s: %w", path, err)
	}
	return ups, nil
}

// hint says what a flag wants when the flag package could not parse its
// value (its message is only "parse error").
func hint(fs *flag.FlagSet, msg string) string {
	_, rest, ok := strings.Cut(msg, "flag -")
	if !ok || !strings.Contains(msg, "parse error") {
		return ""
	}
	name, _, _ := strings.Cut(rest, ":")
	f := fs.Lookup(name)
	if f == nil {
		return ""
	}
	switch f.Value.(flag.Getter).Get().(type) {
	case time.Duration:
		return " (want a duration such as 5s or 1m)"
	case int:
		return " (want a whole number)"
	case bool:
		return " (want true or false)"
	}
	return ""
}

// config turns the options into the proxy's Config.
func (o options) config(log *slog.Logger) pinproxy.Config {
	cfg := pinproxy.Config{
		Upstreams:         o.upstreams,
		DialTimeout:       o.dialTimeout,
		MaxDialAttempts:   o.maxDialAttempts,
		RebalanceInterval: o.rebalanceInterval,
		RebalanceMaxMoves: o.rebalanceMaxMoves,
		DrainRemoved:      o.drainRemoved,
		CheckInterval:     o.checkInterval,
		CheckRise:         o.checkRise,
		CheckFall:         o.checkFall,
		SlowStart:         o.slowStart,
		ParkAfter:         o.parkAfter,
		SendProxy:         o.sendProxy,
		MaxConns:          o.maxConns,
		LogConnections:    o.logConnections,
		Logger:            log,
	}
	if o.rebalanceInterval == 0 {
		cfg.RebalanceInterval = -1 // off; zero would mean the default
	}
	return cfg
}

// run is the whole command; it returns the exit status. sigs delivers
// SIGTERM, SIGINT and SIGHUP.
func run(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer, sigs <-chan os.Signal) int {
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
	defer lw.Close()
	log := cmdkit.NewLogger(lw, o.logFormat == "json", o.logLevel)

	p, err := pinproxy.New(o.config(log))
	var ue *pinproxy.UpstreamError
	if errors.As(err, &ue) { // names the bad upstream
		fmt.Fprintf(stderr, "pinproxy: %s-upstreams: %s\n", o.fromEnvPrefix("-upstreams"), ue.Detail())
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "pinproxy: %v\n", err)
		return 2
	}
	ctx := context.Background()
	// The proxy's own listener: accepted clients come with keepalive set.
	ln, err := p.Listen(ctx, "tcp", o.listen)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			err = oe.Err // "bind: address already in use"
		}
		fmt.Fprintf(stderr, "pinproxy: -listen: cannot listen on %s: %v\n", o.listen, err)
		return 2
	}
	var admin *adminServer
	var adminLn net.Listener
	if o.admin != "" {
		adminLn, err = net.Listen("tcp", o.admin)
		if err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "pinproxy: -admin: cannot listen on %s: %v\n", o.admin, errors.Unwrap(err))
			return 2
		}
		admin = newAdminServer(p, bi, log, lw)
	}

	served := make(chan error, 2)
	go func() { served <- p.Serve(ln) }()
	go warnUnresolved(o.upstreamsFile, o.upstreams, net.DefaultResolver, log)
	if admin != nil {
		go func() { served <- admin.Serve(adminLn) }()
		log.Info("admin listening", "addr", adminLn.Addr().String(), "paths", strings.Join(admin.paths, " "))
	}
	log.Info("pinproxy listening", "addr", ln.Addr().String(), "version", bi.Version, "commit", bi.Commit,
		"upstreams", strings.Join(o.upstreams, ","), "upstreams_file", o.upstreamsFile,
		"rebalance_interval", o.rebalanceInterval, "dial_timeout", o.dialTimeout,
		"max_conns", o.maxConns, "max_conns_from", o.maxConnsFrom, "check_interval", o.checkInterval)

	code := 0
wait:
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reload(p, o.upstreamsFile, log)
				continue
			}
			log.Info("signal received; draining", "signal", sig.String(), "live", p.Totals().Live, "timeout", o.shutdownTimeout)
			break wait
		case err := <-served:
			log.Error("serving failed", "err", err)
			code = 1
			break wait
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- p.Shutdown(sctx) }()
drain:
	for {
		select {
		case <-drained: // a drain that ran out of time is logged by Shutdown, once
			break drain
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				log.Info("SIGHUP during the drain; ignored")
				continue
			}
			log.Info("second signal; closing the connections left now", "signal", sig.String())
			cancel()
		}
	}
	if admin != nil {
		actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
		admin.Shutdown(actx)
		acancel()
	}
	log.Info("pinproxy stopped", "moves", p.Totals().Moves)
	return code
}

// reload re-reads the upstreams file into p. A bad file keeps the current
// list; either way it logs one line.
func reload(p *pinproxy.Proxy, path string, log *slog.Logger) {
	if path == "" {
		log.Warn("SIGHUP without -upstreams-file; nothing to reload, ignored")
		return
	}
	ups, err := readUpstreams(path)
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
	handle("/healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	handle("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !p.Ready() {
			http.Error(w, "not ready: not listening, or no upstream up", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	return &adminServer{paths: adminPaths, Server: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute, // idle keep-alive connections closed within two minutes
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
}
