// Command pinproxy is a TCP proxy for long-lived connections pinned to a
// few upstream nodes: each client goes to the upstream with the fewest
// live connections (ties: the one listed first), a failed dial moves on to
// the next, and once a minute a connection is moved back to a node that
// answers again. The logic is in package pinproxy; this command parses
// flags, serves, and handles signals.
//
//	pinproxy -listen 127.0.0.1:9333 -upstreams eu-01:9333,usa-01:9333 -admin 127.0.0.1:9334
//
// Every flag can also be set in the environment as PINPROXY_ and the flag
// name in capitals with "_" for "-" (PINPROXY_LISTEN, PINPROXY_UPSTREAMS,
// PINPROXY_REBALANCE_INTERVAL, ...); a flag given on the command line
// wins over the environment.
//
// With -admin, it serves Prometheus metrics on /metrics and each
// upstream's state (live connections, dials, failures) as JSON on /status.
//
// Exit status: 0 after SIGTERM or SIGINT, once the live connections have
// closed or -shutdown-timeout has passed (then they are closed); 2 for a
// bad flag or environment value, or an address it cannot listen on, with
// one line on stderr saying which; 1 if serving fails later.
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
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxymetrics"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.LookupEnv, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the parsed flags.
type options struct {
	listen            string
	upstreams         []string
	rebalanceInterval time.Duration
	dialTimeout       time.Duration
	maxConns          int
	admin             string
	logFormat         string
	logLevel          slog.Level
	shutdownTimeout   time.Duration
}

// usageError is a bad flag or environment value: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// envName is the environment variable for a flag: -dial-timeout →
// PINPROXY_DIAL_TIMEOUT.
func envName(flag string) string {
	return "PINPROXY_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func parseFlags(args []string, lookupEnv func(string) (string, bool), stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("pinproxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.listen, "listen", "", "address to accept clients on, host:port (required)")
	upstreams := fs.String("upstreams", "", "upstreams in order of preference, host:port,host:port (at least one)")
	fs.DurationVar(&o.rebalanceInterval, "rebalance-interval", pinproxy.DefaultRebalanceInterval, "time between rebalance rounds (0 turns them off)")
	fs.DurationVar(&o.dialTimeout, "dial-timeout", pinproxy.DefaultDialTimeout, "bound on each dial to an upstream")
	fs.IntVar(&o.maxConns, "max-conns", 0, "most client connections at once; over it a new client is closed at once (0: no limit)")
	fs.StringVar(&o.admin, "admin", "", "address for /metrics and /status, host:port (default: off)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error (debug logs every connection)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long to wait for live connections before closing them")
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "usage: pinproxy -listen host:port -upstreams host:port[,host:port...] [flags]\n\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			fmt.Fprintf(stderr, "\nEach flag may be set in the environment as PINPROXY_NAME (e.g. PINPROXY_UPSTREAMS); flags win.\n")
			return o, err
		}
		return o, usageError{err.Error() + hint(fs, err.Error())}
	}
	if fs.NArg() > 0 {
		return o, usageError{fmt.Sprintf("unexpected argument %q (flags only)", fs.Arg(0))}
	}
	// The environment fills in the flags not given on the command line.
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || envErr != nil {
			return
		}
		if v, ok := lookupEnv(envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = usageError{fmt.Sprintf("%s=%q: %v", envName(f.Name), v, err) + hint(fs, "flag -"+f.Name+": "+err.Error())}
			}
		}
	})
	if envErr != nil {
		return o, envErr
	}

	if o.listen == "" {
		return o, usageError{"-listen is required (or PINPROXY_LISTEN): the host:port to accept clients on"}
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return o, usageError{fmt.Sprintf("-listen %q: want host:port", o.listen)}
	}
	if strings.TrimSpace(*upstreams) == "" {
		return o, usageError{"-upstreams is required (or PINPROXY_UPSTREAMS): at least one host:port"}
	}
	for i, u := range strings.Split(*upstreams, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			return o, usageError{fmt.Sprintf("-upstreams %q: entry %d is empty", *upstreams, i+1)}
		}
		o.upstreams = append(o.upstreams, u)
	}
	if o.rebalanceInterval < 0 {
		return o, usageError{fmt.Sprintf("-rebalance-interval %v: must not be negative (0 turns rounds off)", o.rebalanceInterval)}
	}
	if o.dialTimeout <= 0 {
		return o, usageError{fmt.Sprintf("-dial-timeout %v: must be positive", o.dialTimeout)}
	}
	if o.maxConns < 0 {
		return o, usageError{fmt.Sprintf("-max-conns %d: must not be negative (0: no limit)", o.maxConns)}
	}
	if o.admin != "" {
		if _, _, err := net.SplitHostPort(o.admin); err != nil {
			return o, usageError{fmt.Sprintf("-admin %q: want host:port", o.admin)}
		}
	}
	switch o.logFormat {
	case "text", "json":
	default:
		return o, usageError{fmt.Sprintf("-log-format %q: want text or json", o.logFormat)}
	}
	if err := o.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return o, usageError{fmt.Sprintf("-log-level %q: want debug, info, warn or error", *logLevel)}
	}
	if o.shutdownTimeout < 0 {
		return o, usageError{fmt.Sprintf("-shutdown-timeout %v: must not be negative", o.shutdownTimeout)}
	}
	return o, nil
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
	}
	return ""
}

// config turns the options into the proxy's Config.
func (o options) config(log *slog.Logger) pinproxy.Config {
	cfg := pinproxy.Config{
		Upstreams:         o.upstreams,
		DialTimeout:       o.dialTimeout,
		RebalanceInterval: o.rebalanceInterval,
		MaxConns:          o.maxConns,
		Logger:            log,
	}
	if o.rebalanceInterval == 0 {
		cfg.RebalanceInterval = -1 // off; zero would mean the default
	}
	return cfg
}

// run is the whole command; it returns the exit status.
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stderr io.Writer) int {
	o, err := parseFlags(args, lookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "pinproxy: %v\n", err)
		return 2
	}
	opts := &slog.HandlerOptions{Level: o.logLevel}
	var log *slog.Logger
	if o.logFormat == "json" {
		log = slog.New(slog.NewJSONHandler(stderr, opts))
	} else {
		log = slog.New(slog.NewTextHandler(stderr, opts))
	}

	p, err := pinproxy.New(o.config(log))
	if err != nil { // names the bad upstream
		fmt.Fprintf(stderr, "pinproxy: -upstreams: %s\n", strings.TrimPrefix(err.Error(), "pinproxy: "))
		return 2
	}
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
	var admin *http.Server
	var adminLn net.Listener
	if o.admin != "" {
		adminLn, err = net.Listen("tcp", o.admin)
		if err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "pinproxy: -admin: cannot listen on %s: %v\n", o.admin, errors.Unwrap(err))
			return 2
		}
		admin = &http.Server{Handler: adminHandler(p), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	}

	served := make(chan error, 2)
	go func() { served <- p.Serve(ln) }()
	if admin != nil {
		go func() { served <- admin.Serve(adminLn) }()
		log.Info("admin listening", "addr", adminLn.Addr().String(), "paths", "/metrics /status")
	}
	log.Info("pinproxy listening", "addr", ln.Addr().String(), "upstreams", strings.Join(o.upstreams, ","),
		"rebalance_interval", o.rebalanceInterval, "dial_timeout", o.dialTimeout, "max_conns", o.maxConns)

	code := 0
	select {
	case <-ctx.Done():
		log.Info("signal received; draining", "live", p.Totals().Live, "timeout", o.shutdownTimeout)
	case err := <-served:
		log.Error("serving failed", "err", err)
		code = 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		log.Warn("drain timed out; closed the connections left", "err", err)
	}
	if admin != nil {
		actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
		admin.Shutdown(actx)
		acancel()
	}
	log.Info("pinproxy stopped", "moves", p.Totals().Moves)
	return code
}

// adminHandler serves /metrics (Prometheus, from a registry of its own)
// and /status (JSON).
func adminHandler(p *pinproxy.Proxy) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(pinproxymetrics.NewCollector(p))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			Upstreams []pinproxy.UpstreamStats `json:"upstreams"`
			Totals    pinproxy.Totals          `json:"totals"`
		}{p.Stats(), p.Totals()})
	})
	return mux
}
