package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/notify"
	"github.com/proofkit/nodekit/examples/platform/internal/pgstore"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

type options struct {
	listen    string
	debug     string
	tokenFile string
	db        string
	dbBatch   int
	dbCache   int
	dbWorkers int
	dbLinger  time.Duration
	routes    string
	planEvery time.Duration
	logFormat string
	maxConns  int
	// maxConnsFrom says what set maxConns: "-max-conns" or the
	// open-file limit.
	maxConnsFrom string
	version      bool
	healthcheck  bool
	notify       notify.Config
	cfg          store.Config
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
	fs.StringVar(&o.debug, "debug-listen", "", "address to serve Go's profiles on (/debug/pprof/), without a token: a loopback address, for measuring (empty: none)")
	fs.StringVar(&o.tokenFile, "token-file", "", "file of bearer tokens, one a line: TOKEN (the admin: any node, every endpoint), TOKEN operator:NAME (an operator: their own nodes), TOKEN NODE [operator:NAME] (that node's agent: reports only); reloaded on SIGHUP (required)")
	fs.StringVar(&o.cfg.StateDir, "state-dir", "platform-state", "directory for one JSON file per node (the embedded store, when -db is not given)")
	fs.StringVar(&o.db, "db", "", "PostgreSQL URL (postgres://…): keep the state in that database instead of -state-dir, so several replicas can share it")
	fs.IntVar(&o.dbBatch, "db-batch", 64, "with -db: the most reports one transaction takes when they arrive together (1: a transaction a report)")
	fs.IntVar(&o.dbWorkers, "db-workers", pgstore.DefaultBatchWorkers, fmt.Sprintf("with -db: the most batches of reports a replica has in flight at once (one at a time; another beside it once it is full or has run %v, held up on a lock)", pgstore.DefaultBatchSpill))
	fs.DurationVar(&o.dbLinger, "db-linger", 0, "with -db: how long a batch waits for more reports before its transaction starts (0: not at all; under load, more reports a commit)")
	fs.IntVar(&o.dbCache, "db-cache", 200000, "with -db: the most nodes a replica keeps a copy of, as it last wrote them, to take a quiet node's report in one statement (0: none)")
	fs.StringVar(&o.routes, "routes", "", "route table to seed nodes and routes from (JSON; see routes.json)")
	fs.DurationVar(&o.planEvery, "plan-every", 30*time.Second, "time between plan rounds (one also runs after each report)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.IntVar(&o.maxConns, "max-conns", 0, "most connections served at once; over it GET /healthz is still answered, the rest 503 (0: no limit; default: from the open-file limit)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.BoolVar(&o.healthcheck, "healthcheck", false, "ask the platform running at -listen for /healthz; exit 0 if healthy, else 1 (for a container's HEALTHCHECK)")
	fs.StringVar(&o.notify.File, "notify-file", "", "receivers of notices, one a line: NODE URL SECRET [SECRET…] (NODE * for every node without a line; reloaded on SIGHUP)")
	fs.DurationVar(&o.notify.GiveUp, "notify-give-up", notify.DefaultGiveUp, "how long a notice's delivery is retried before it is failed")
	fs.BoolVar(&o.notify.Ended, "notify-ended", false, "also send node.overload_ended when an overload ends")
	fs.BoolVar(&o.notify.PublicOnly, "notify-public-only", false, "send operators' own receivers (set through the API) messages only at public addresses: refuse a connection to a loopback, private, link-local or shared address, so an operator cannot make the platform call its own network (set it where operators are not the platform's own staff)")
	fs.DurationVar(&o.notify.Timeout, "notify-timeout", notify.DefaultTimeout, "how long one delivery attempt may take; a replica that dies mid-attempt leaves the delivery to the others after twice this and 5 s")
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
	if o.version || o.healthcheck {
		return o, nil
	}
	if o.tokenFile == "" {
		return o, errors.New("-token-file is required")
	}
	if o.planEvery <= 0 {
		return o, fmt.Errorf("-plan-every %v: must be positive", o.planEvery)
	}
	if o.dbWorkers < 1 {
		return o, fmt.Errorf("-db-workers %d: want 1 or more", o.dbWorkers)
	}
	if o.dbLinger < 0 || o.dbLinger > time.Second {
		return o, fmt.Errorf("-db-linger %v: want 0 to 1s", o.dbLinger)
	}
	if o.dbCache < 0 {
		return o, fmt.Errorf("-db-cache %d: must not be negative (0: none)", o.dbCache)
	}
	if o.dbBatch < 0 {
		return o, fmt.Errorf("-db-batch %d: want 1 or more (1: a transaction a report)", o.dbBatch)
	}
	if scheme, _, _ := strings.Cut(o.db, "://"); pgstore.IsURL(o.db) && scheme != "postgres" && scheme != "postgresql" {
		return o, fmt.Errorf("-db %s: want a postgres:// or postgresql:// URL, or key=value pairs", pgstore.RedactDSN(o.db))
	}
	if o.maxConns < 0 {
		return o, fmt.Errorf("-max-conns %d: must not be negative (0: no limit)", o.maxConns)
	}
	o.maxConnsFrom = "-max-conns"
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "max-conns" })
	if !set {
		o.maxConnsFrom = "no open-file limit"
		if n, ok := fileLimit(); ok {
			o.maxConns = api.MaxConnsForFiles(n)
			o.maxConnsFrom = fmt.Sprintf("RLIMIT_NOFILE %d", n)
		}
	}
	if o.notify.Timeout <= 0 {
		return o, fmt.Errorf("-notify-timeout %v: must be positive", o.notify.Timeout)
	}
	if o.notify.GiveUp <= 0 {
		return o, fmt.Errorf("-notify-give-up %v: must be positive", o.notify.GiveUp)
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return o, fmt.Errorf("-log-format %q: want text or json", o.logFormat)
	}
	if o.cfg.Policy.CoolDown == 0 {
		o.cfg.Policy.CoolDown = -1 // -cool-down 0 means none; the Policy reads 0 as the default
	}
	return o, nil
}
