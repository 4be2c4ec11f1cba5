// Command platform is a small example of the platform's side of nodekit:
// an HTTP service that takes the agents' readings, keeps one
// overload.Tracker per node, answers whether a node takes new connections,
// runs routing plan rounds over an in-memory route table, and prices each
// route's session with the pricing package.
//
// Its embedded store is one process, one lock and one JSON file per node in
// -state-dir (written atomically after each change, read back at start, so
// a restart loses nothing). With -db postgres://… the state lives in
// PostgreSQL instead, and several replicas may serve one fleet (see
// docs/platform.md, "Running at fleet scale"). The route table is
// seeded from a JSON file, and "carrying out" a plan means closing the
// route in that table and logging it.
//
//	go run ./examples/platform -token-file token -routes examples/platform/routes.json
//
// API (everything but /healthz needs "Authorization: Bearer <token>"; a
// node's token may only report for that node; the GETs, which show users'
// routes, keys and prices, need an operator's token):
//
//	POST /report          an overload.Reading, as the agent sends it
//	GET  /admit?node=X    {"admit":false,"reason":"overloaded",…}
//	POST /routes          {"node","user","key"} opens a route if admitted (409 if not)
//	POST /traffic         {"route","bytes"} charges traffic at the session's price
//	POST /price           {"node","price"} changes a node's price from now on
//	GET  /nodes, /nodes/X per node: overload, admission, routes, last plan, events;
//	                      /nodes?after=ID&limit=N pages, Link: rel="next"
//	GET  /nodes/X/events  the node's events, oldest first: ?after=ID&limit=N
//	GET  /notices         every notice, oldest first; ?after=…&limit=N pages
//	GET  /healthz         {"ok":true}, no token
//	GET  /plans           each node's latest plan that closed something
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	listen    string
	tokenFile string
	stateDir  string
	db        string
	dbBatch   int
	routes    string
	planEvery time.Duration
	logFormat string
	cfg       config
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("platform", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: platform -token-file FILE [flags]

An example platform: takes agents' readings (POST /report), keeps one
overload tracker per node, answers GET /admit?node=X, closes routes by
routing plans, prices sessions, shows per-node state at GET /nodes.
An example, not a production control plane.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to serve the API on")
	fs.StringVar(&o.tokenFile, "token-file", "", "file of bearer tokens, one a line: TOKEN (operator: any node, every endpoint) or TOKEN NODE (that node's agent: reports only) (required)")
	fs.StringVar(&o.stateDir, "state-dir", "platform-state", "directory for one JSON file per node (the embedded store, when -db is not given)")
	fs.StringVar(&o.db, "db", "", "PostgreSQL URL (postgres://…): keep the state in that database instead of -state-dir, so several replicas can share it")
	fs.IntVar(&o.dbBatch, "db-batch", 64, "with -db: the most reports one transaction takes when they arrive together (1: a transaction a report)")
	fs.StringVar(&o.routes, "routes", "", "route table to seed nodes and routes from (JSON; see routes.json)")
	fs.DurationVar(&o.planEvery, "plan-every", 30*time.Second, "time between plan rounds (one also runs after each report)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	pol := &o.cfg.Policy
	fs.DurationVar(&pol.CoolDown, "cool-down", routing.DefaultCoolDown, "after an overload ends, how long the node takes nobody new (negative: none)")
	fs.DurationVar(&pol.UnusedAfter, "unused-after", routing.DefaultUnusedAfter, "a route that moved no traffic this long is unused")
	fs.Float64Var(&pol.UnusedPerHour, "unused-per-hour", routing.DefaultUnusedPerHour, "share of an overloaded exit's sessions whose unused routes are closed an hour")
	fs.DurationVar(&pol.MoveAfter, "move-after", routing.DefaultMoveAfter, "how long an overload lasts before routes in use are moved")
	fs.Float64Var(&pol.MoveMemoryPercent, "move-memory", routing.DefaultMoveMemoryPercent, "routes in use are moved only while memory is above this %")
	fs.DurationVar(&pol.MoveEvery, "move-every", routing.DefaultMoveEvery, "at most one route in use is closed per this interval")
	fs.DurationVar(&o.cfg.Limits.NoticeEvery, "notice-every", time.Hour, "least time between two notices for one node")
	fs.DurationVar(&o.cfg.Prices.Window, "price-window", pricing.DefaultWindow, "how long a lower price must stand before it reaches a running session")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	}
	if o.tokenFile == "" {
		return o, errors.New("-token-file is required")
	}
	if o.planEvery <= 0 {
		return o, fmt.Errorf("-plan-every %v: must be positive", o.planEvery)
	}
	if o.dbBatch < 0 {
		return o, fmt.Errorf("-db-batch %d: want 1 or more (1: a transaction a report)", o.dbBatch)
	}
	if scheme, _, ok := strings.Cut(o.db, "://"); ok && scheme != "postgres" && scheme != "postgresql" {
		return o, fmt.Errorf("-db %s: want a postgres:// or postgresql:// URL", redactURL(o.db))
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return o, fmt.Errorf("-log-format %q: want text or json", o.logFormat)
	}
	if o.cfg.Policy.CoolDown == 0 {
		o.cfg.Policy.CoolDown = -1 // -cool-down 0 means none; the Policy reads 0 as the default
	}
	o.cfg.StateDir = o.stateDir
	return o, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "platform: %v\n", err)
		return 2
	}
	var log *slog.Logger
	if o.logFormat == "json" {
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	} else {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	o.cfg.Logger = log

	toks, err := readTokens(o.tokenFile)
	if err != nil {
		fmt.Fprintf(stderr, "platform: -token-file %s: %v\n", o.tokenFile, err)
		return 2
	}
	var seed *seedFile
	if o.routes != "" {
		if seed, err = readSeed(o.routes); err != nil {
			fmt.Fprintf(stderr, "platform: %v\n", err)
			return 2
		}
	}
	var svc service
	where := []any{"state_dir", o.stateDir}
	if o.db != "" {
		pg, err := openPG(ctx, o.db, o.cfg, pgOptions{PlanEvery: o.planEvery, Batch: o.dbBatch}, seed)
		if err != nil {
			fmt.Fprintf(stderr, "platform: %v\n", err)
			return 2
		}
		defer pg.close()
		svc, where = pg, []any{"db", redactURL(o.db)}
	} else {
		p, err := newPlatform(o.cfg, seed)
		if err != nil {
			fmt.Fprintf(stderr, "platform: %v\n", err)
			return 2
		}
		svc = p
	}

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		fmt.Fprintf(stderr, "platform: -listen: %v\n", err)
		return 1
	}
	srv := &http.Server{
		Handler:           handler(svc, toks),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("platform serving", append([]any{"addr", ln.Addr().String()},
		append(where, "plan_every", o.planEvery, "cool_down", o.cfg.Policy.CoolDown)...)...)

	tick := time.NewTicker(o.planEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			rctx, cancel := context.WithTimeout(ctx, o.planEvery)
			if err := svc.planRound(rctx); err != nil {
				log.Warn("plan round", "err", err)
			}
			cancel()
		case err := <-served:
			log.Error("serving stopped", "err", err)
			return 1
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := srv.Shutdown(sctx)
			cancel()
			if err != nil {
				log.Warn("shutdown", "err", err)
			}
			log.Info("stopped", where...)
			return 0
		}
	}
}

func readTokens(path string) (tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseTokens(f)
}

// redactURL is a database URL with its password left out, for logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a database URL that does not parse)"
	}
	return u.Redacted()
}
