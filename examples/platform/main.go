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
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/filestore"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/notify"
	"github.com/proofkit/nodekit/examples/platform/internal/pgstore"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/buildinfo"
	"github.com/proofkit/nodekit/internal/cmdkit"
	"github.com/proofkit/nodekit/internal/logbuf"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// logGrace bounds a log call's wait for its line to be written out (an
// output slower than that is taken as stalled until it takes a line),
// and the wait for the last lines at exit.
const logGrace = 250 * time.Millisecond

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// SIGHUP is taken from the start: one that comes while the platform
	// starts (its log says it serves before its loop runs) waits here for
	// the loop, instead of ending the process as SIGHUP does by default.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "platform: %v\n", err)
		return 2
	}
	bi := buildinfo.Read()
	if o.version {
		// The name it is installed as (the release's proofkit-platform), so
		// the line matches the file it came in.
		fmt.Fprintf(stdout, "proofkit-platform %s\n", bi)
		return 0
	}
	if o.healthcheck {
		return cmdkit.Healthcheck("platform", o.listen, stdout, stderr)
	}
	// Lines go out through a buffer written by a goroutine of its own.
	// Each log call waits for its line to be written, as with a plain
	// stderr, so a replica killed loses none (a closure is logged as it
	// is carried out); but a stderr that does not drain (a journald that
	// is not reading) costs one logGrace, then lines are dropped rather
	// than stall a request, a delivery or the exit, which waits at most
	// logGrace for the last ones.
	lw := logbuf.New(stderr, logbuf.Config{Wait: logGrace})
	defer lw.CloseWithin(logGrace)
	stderr = lw
	log := cmdkit.NewLogger(lw, o.logFormat == "json", slog.LevelInfo)
	o.cfg.Logger = log
	gogc, memLimit := setGC()

	toks, err := api.ReadTokens(o.tokenFile)
	if err != nil {
		fmt.Fprintf(stderr, "platform: -token-file %s: %v\n", o.tokenFile, err)
		return 2
	}
	var rs *notify.Receivers
	if o.notify.File != "" {
		if rs, err = notify.ReadReceivers(o.notify.File); err != nil {
			fmt.Fprintf(stderr, "platform: -notify-file: %v\n", err)
			return 2
		}
	}
	d := notify.NewDispatch(o.notify, rs)
	o.cfg.Dispatch = d
	var seed *store.SeedFile
	if o.routes != "" {
		if seed, err = store.ReadSeed(o.routes); err != nil {
			fmt.Fprintf(stderr, "platform: %v\n", err)
			return 2
		}
	}
	var svc store.Store
	where := []any{"state_dir", o.cfg.StateDir}
	if o.db != "" {
		pg, err := pgstore.Open(ctx, o.db, o.cfg, pgstore.Options{PlanEvery: o.planEvery, Batch: o.dbBatch, Workers: o.dbWorkers, Linger: o.dbLinger, Cache: o.dbCache}, seed)
		if err != nil {
			fmt.Fprintf(stderr, "platform: %v\n", err)
			return 2
		}
		defer pg.Close()
		svc, where = pg, []any{"db", pgstore.RedactDSN(o.db)}
	} else {
		p, err := filestore.Open(o.cfg, seed)
		if err != nil {
			fmt.Fprintf(stderr, "platform: %v\n", err)
			return 2
		}
		svc = p
	}

	sender := notify.New(o.notify, d, svc.Outbox(), log, o.cfg.Now)
	f := fleet.New(svc, sender)
	if seed != nil {
		f.Owners = seed.Operators
	}
	if err := api.CheckOwners(toks, f.Owners); err != nil {
		fmt.Fprintf(stderr, "platform: -token-file %s: %v\n", o.tokenFile, err)
		return 2
	}

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		fmt.Fprintf(stderr, "platform: -listen: %v\n", err)
		return 1
	}
	ln = api.NewCapListener(ln, o.maxConns, log)
	h := api.Handler(f, toks)
	srv := api.NewServer(h, o.maxConns, log)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if o.debug != "" {
		dln, err := net.Listen("tcp", o.debug)
		if err != nil {
			fmt.Fprintf(stderr, "platform: -debug-listen: %v\n", err)
			return 1
		}
		dsrv := &http.Server{Handler: debugHandler(), ReadHeaderTimeout: api.ReadHeaderTimeout}
		go dsrv.Serve(dln)
		defer dsrv.Close()
		log.Info("profiles served", "debug_addr", dln.Addr().String())
	}
	log.Info("platform serving", append([]any{"addr", ln.Addr().String(), "version", bi.Version, "commit", bi.Commit},
		append(where, "plan_every", o.planEvery, "cool_down", o.cfg.Policy.CoolDown,
			"max_conns", o.maxConns, "max_conns_from", o.maxConnsFrom, "gogc", gogc, "memory_limit", memLimit)...)...)

	f.NotifyUnreached(ctx, log)
	nctx, stopNotify := context.WithCancel(ctx)
	notifying := make(chan struct{})
	go func() { defer close(notifying); sender.Run(nctx) }()
	defer func() { stopNotify(); <-notifying }()
	tick := time.NewTicker(o.planEvery)
	defer tick.Stop()
	for {
		select {
		case <-hup:
			reloadTokens(ctx, h, o.tokenFile, log)
			if err := sender.Reload(); err != nil {
				log.Error("notify file not reloaded", "err", err)
			}
		case <-tick.C:
			rctx, cancel := context.WithTimeout(ctx, o.planEvery)
			if err := f.Round(rctx); err != nil {
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

// reloadTokens reads the token file again (SIGHUP) and puts it in force;
// a file that cannot be read, or is refused, leaves the one in force.
func reloadTokens(ctx context.Context, h *api.API, path string, log *slog.Logger) {
	toks, err := api.ReadTokens(path)
	if err == nil {
		err = h.Reload(ctx, toks)
	}
	if err != nil {
		log.Error("token file not reloaded", "err", fmt.Errorf("-token-file %s: %w (the previous file stays in force)", path, err))
		return
	}
	log.Info("token file reloaded", "file", path, "tokens", len(toks))
}
