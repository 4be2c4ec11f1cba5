// Command proofkit-agent is the node agent operators run on each node: it
// sizes the kernel's connection table and buffers at start, takes a
// reading every 30 seconds, decides locally whether the node is
// overloaded, reports each reading to the platform, and serves a page at
// /, /metrics, /status, /events, /healthz and /readyz on 127.0.0.1:9464.
//
// Run with no flags it is standalone: it probes, evaluates, logs and
// serves, and reports nothing. The logic is in package agent; this
// command parses flags, wires the packages and handles signals.
//
//	proofkit-agent -report-url "$PLATFORM_URL" \
//	    -token-file /etc/proofkit-agent/token -state-dir /var/lib/proofkit-agent
//
// where PLATFORM_URL is the report URL your platform gave, such as
// https://platform.example/api/v1/readings in its documentation: that
// placeholder itself is refused.
//
// SIGHUP (systemctl reload, with ExecReload=kill -HUP $MAINPID) reads the
// -token-file again after the platform's token was rotated and logs
// "token reloaded", or, if the file is missing, empty or of more than one
// line, a warning saying so: the agent then keeps the token it has.
// Either way it runs on. It also reads the file again by itself when the
// platform answers 401 or 403, at most once an interval.
//
// Every flag but -version can also be given in the environment, as
// PROOFKIT_AGENT_ and the flag's name in capitals with "-" as "_":
// PROOFKIT_AGENT_REPORT_URL, PROOFKIT_AGENT_TOKEN_FILE,
// PROOFKIT_AGENT_STATE_DIR, PROOFKIT_AGENT_LISTEN,
// PROOFKIT_AGENT_LINK_SPEED and so on. A flag on the command line wins over
// its variable. PROOFKIT_AGENT_VERSION is left to deployments. The defaults of -state-dir (state) and -sysctl-dir (config)
// are relative to the working directory; the shipped systemd unit and
// container image give absolute ones.
//
// -version prints the version, commit and Go version and exits. The
// version is the module's (go install …@v0.5.0) or the linker's
// (-ldflags "-X github.com/proofkit/nodekit/internal/buildinfo.version=v0.5.0").
//
// -healthcheck asks the running agent's /healthz at -listen (or
// PROOFKIT_AGENT_LISTEN) and exits 0 when it answers 200, else 1: a
// container's HEALTHCHECK, in an image that has no curl.
//
// Under systemd with Type=notify the agent sends READY=1 to
// $NOTIFY_SOCKET once its first reading is taken and its state written,
// and STOPPING=1 when it stops.
//
// -require-report makes a start without a report URL an error (exit 2,
// "no report URL: give -report-url or PROOFKIT_AGENT_REPORT_URL (…)"):
// the packaged unit passes it and takes the URL from
// /etc/default/proofkit-agent, so an unedited file stops the agent at
// once. A report URL on a name reserved for documentation
// (platform.example, anything under .example or .invalid, example.com,
// .net, .org) is always refused, naming the host.
//
// -report-ca names a PEM file of CA certificates to trust for an https
// -report-url instead of the system's: a platform with its own CA. A
// reporting agent checks -node (by default the host name) at start
// against the platform's rule, 1 to 64 of A-Z a-z 0-9 . _ - not starting
// with . _ -, since the platform would refuse every reading of another.
//
// -interval takes 100ms to 5m, -queue-max 1 to 2880; -listen "" is
// refused (off is said as off).
//
// Exit status: 0 on SIGTERM or SIGINT (state saved) and after -once; 2 for
// a bad flag (a -proc without meminfo, a -netns that is no network
// namespace, a flag whose value is missing, a
// -node the platform would refuse, a placeholder -report-url, no report
// URL with -require-report), an unreadable token file (also one
// that is a FIFO, a device or over 64 KiB) or an unwritable state
// directory, with one line on stderr saying why; 1 when the agent cannot run (no probe on this
// system, the listen address taken, the state directory locked by another
// agent: one line naming the directory and that agent's pid).
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
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/proofkit/nodekit/agent"
	"github.com/proofkit/nodekit/internal/buildinfo"
	"github.com/proofkit/nodekit/internal/cmdkit"
	"github.com/proofkit/nodekit/internal/logbuf"
	"github.com/proofkit/nodekit/internal/sdnotify"
	"github.com/proofkit/nodekit/overload/probe"
	"github.com/proofkit/nodekit/sysctl"
)

// stopGrace is how long the agent may take to stop after SIGTERM or
// SIGINT before it exits anyway (status 1), whatever it is blocked on (a
// probe read of a file that never answers, a disk that does not). With
// lastWords and the time the process takes to be scheduled and torn down,
// the agent is gone within the 0.9 s the documentation gives (0.76 s
// measured with CPU to spare; a machine whose every CPU is busy adds its
// scheduling delays).
const stopGrace = 700 * time.Millisecond

// lastWords bounds the wait for the watchdog's last line: a stderr that
// does not drain (a pipe to a journald that is not reading) must not
// hold the exit. Without it, such a pipe kept the agent from ever
// exiting after SIGTERM.
const lastWords = 50 * time.Millisecond

// logWait bounds a log call's wait for its line to be written out; an
// output slower than that is taken as stalled until it takes a line.
const logWait = 250 * time.Millisecond

// logGrace bounds each wait for the log's buffered lines to go out: at
// exit, and before READY=1. Writing them takes microseconds; the bound
// is for a stderr that does not drain, and leaves the exit well inside
// stopGrace.
const logGrace = 200 * time.Millisecond

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go watchdog(ctx, stopGrace, os.Stderr, os.Exit)
	// Caught from the start: SIGHUP's default action would end the agent.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, hup)
	signal.Stop(hup)
	stop()
	os.Exit(code)
}

// watchdog calls exit(1) once grace has passed since ctx ended, unless
// the process has exited by then. Its last line goes to stderr from a
// goroutine of its own, waited for at most lastWords.
func watchdog(ctx context.Context, grace time.Duration, stderr io.Writer, exit func(int)) {
	<-ctx.Done()
	time.Sleep(grace)
	said := make(chan struct{})
	go func() {
		fmt.Fprintf(stderr, "proofkit-agent: did not stop within %v of the signal; exiting without waiting\n", grace)
		close(said)
	}()
	select {
	case <-said:
	case <-time.After(lastWords):
	}
	exit(1)
}

func newLogger(o options, w io.Writer) *slog.Logger {
	return cmdkit.NewLogger(w, o.logFormat == "json", o.logLevel)
}

// run runs the agent until ctx ends; each value on hup (SIGHUP) reads the
// token file again.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, hup <-chan os.Signal) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "proofkit-agent: %v\n", err)
		return 2
	}
	if o.version {
		fmt.Fprintf(stdout, "proofkit-agent %s\n", buildinfo.Read())
		return 0
	}
	if o.healthcheck {
		return cmdkit.Healthcheck("proofkit-agent", o.listen, stdout, stderr)
	}
	if o.node == "" {
		h, err := os.Hostname()
		if err != nil {
			fmt.Fprintf(stderr, "proofkit-agent: no -node given and no host name: %v\n", err)
			return 2
		}
		o.node = h
	}
	// Lines go out through a buffer written by a goroutine of its own.
	// Each log call waits for its line to be written, as with a plain
	// stderr, so a SIGKILL loses none (the log names every report it
	// drops); but a stderr that does not drain (a journald that is not
	// reading) costs one logWait, then lines are dropped instead of
	// stalling readings and reports, and cannot hold the exit: the last
	// lines get logGrace to go out.
	lw := logbuf.New(stderr, logbuf.Config{Wait: logWait})
	defer lw.CloseWithin(logGrace)
	stderr = lw
	log := newLogger(o, lw)
	cmdkit.WarnUnknownEnv(log, flagSet(&options{}), envPrefix, os.Environ())
	pcfg := probe.Config{
		ProcRoot: o.procRoot, SysRoot: o.sysRoot, NetNS: o.netns,
		LinkSpeedMbps: o.linkSpeed, Node: o.node, Logger: log,
		LinkSpeedHint: "give it with -link-speed, e.g. -link-speed eth0=1000 for 1 Gbit/s",
	}
	if o.once {
		return once(ctx, pcfg, stdout, stderr)
	}
	p, err := probe.New(pcfg)
	if err != nil {
		fmt.Fprintf(stderr, "proofkit-agent: %v\n", err)
		return 1
	}
	defer p.Close()
	return runAgent(ctx, o, p, log, lw, hup)
}

// runAgent runs the agent on the probe p until ctx ends; its lines go to
// log, written out through lw.
func runAgent(ctx context.Context, o options, p *probe.Probe, log *slog.Logger, lw *logbuf.Writer, hup <-chan os.Signal) int {
	stderr := io.Writer(lw)
	src, now := testClock(p)
	a, err := agent.New(agent.Config{
		Node: o.node, Source: src, Now: now, Interval: o.interval,
		StateDir: o.stateDir, QueueMax: o.queueMax,
		ReportURL: o.reportURL, TokenFile: o.tokenFile, ReportCA: o.reportCA,
		Logger: log, LogLinesDropped: lw.Dropped,
	})
	if err != nil {
		fmt.Fprintf(stderr, "proofkit-agent: %v\n", configError(err, o))
		if errors.Is(err, agent.ErrLocked) {
			return 1
		}
		return 2 // a bad flag, token file or state directory
	}
	defer a.Close()                              // releases the state directory's lock; the exit would too
	defer onHUP(ctx, hup, a, o.tokenFile, log)() // stopped before Close

	srv, err := serve(o.listen, a, log)
	if err != nil {
		fmt.Fprintf(stderr, "proofkit-agent: -listen: %v\n", err)
		return 1
	}
	if rep, ran := sizeKernel(o, log); ran {
		a.SetSysctl(rep)
	}
	bi := buildinfo.Read()
	log.Info("agent started", "version", bi.Version, "commit", bi.Commit, "go", bi.GoVersion,
		"node", o.node, "interval", o.interval, "state_dir", absPath(o.stateDir),
		"report_url", agent.RedactURL(o.reportURL), "queue_max", o.queueMax)
	notifyDone := notifyReady(ctx, a, o.interval, log, lw)
	err = a.Run(ctx)
	<-notifyDone
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), stopGrace/2)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	if err != nil {
		log.Error("stopping", "err", err)
		return 1
	}
	log.Info("stopped; state saved", "state_dir", o.stateDir)
	return 0
}

// onHUP reads the token file again on each value of hup until ctx ends
// or the returned stop is called (which waits for it).
func onHUP(ctx context.Context, hup <-chan os.Signal, a *agent.Agent, tokenFile string, log *slog.Logger) (stop func()) {
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-hctx.Done():
				return
			case <-hup:
				reloadToken(a, tokenFile, os.Getenv("CREDENTIALS_DIRECTORY"), log)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// serve serves a's handler at listen (nothing when it is empty) and logs
// every path it serves.
func serve(listen string, a *agent.Agent, log *slog.Logger) (*http.Server, error) {
	if listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	srv := cmdkit.NewServer(a.Handler(), log)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serving the agent's page and endpoints stopped", "err", err)
		}
	}()
	log.Info(servingMsg(), "addr", ln.Addr().String())
	return srv, nil
}

// servingMsg is the start-up line naming every path the agent serves:
// "serving /, /metrics, /status, /events, /healthz and /readyz".
func servingMsg() string {
	p := agent.HandlerPaths()
	return "serving " + strings.Join(p[:len(p)-1], ", ") + " and " + p[len(p)-1]
}

// absPath is p made absolute, for the log: the defaults are relative to
// the working directory.
func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// notifyReady tells systemd (Type=notify) READY=1 once the agent is ready
// (its first reading taken, its state written), after the log lines so
// far are written out through lw (for at most logGrace), so that the
// journal shows the start before systemd says the unit started; and
// STOPPING=1 when ctx ends. Without $NOTIFY_SOCKET it does nothing. The
// channel closes when it is done.
func notifyReady(ctx context.Context, a *agent.Agent, interval time.Duration, log *slog.Logger, lw *logbuf.Writer) <-chan struct{} {
	done := make(chan struct{})
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for a.Ready() != nil {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		lw.FlushWithin(logGrace)
		if err := sdnotify.Notify(sock, "READY=1\nSTATUS=taking a reading every "+interval.String()); err != nil {
			log.Warn("could not tell systemd the agent is ready", "socket", sock, "err", err)
			return
		}
		<-ctx.Done()
		_ = sdnotify.Notify(sock, "STOPPING=1")
	}()
	return done
}

// reloadToken reads the token file again, on SIGHUP. credDir is systemd's
// $CREDENTIALS_DIRECTORY, if any.
func reloadToken(a *agent.Agent, file, credDir string, log *slog.Logger) {
	if file == "" {
		log.Warn("SIGHUP: no -token-file to read again")
		return
	}
	changed, err := a.ReloadToken()
	if err != nil {
		log.Warn("token not reloaded; keeping the current one", "err", err)
		return
	}
	log.Info("token reloaded", "file", file, "changed", changed)
	if !changed && credDir != "" && strings.HasPrefix(filepath.Clean(file), filepath.Clean(credDir)+string(filepath.Separator)) {
		// LoadCredential= copies the file when the service starts.
		log.Warn("the token file is a systemd credential, copied when the service started: a token rotated in the original "+
			"reaches the agent when systemd copies it again (at a restart, or at a reload where systemd refreshes credentials on reload)",
			"file", file)
	}
}

// sizeKernel runs sysctl as -sysctl says and logs each key's outcome once;
// it returns the report, and false for -sysctl off. A failure is logged,
// never fatal: the agent still probes and reports.
func sizeKernel(o options, log *slog.Logger) (sysctl.Report, bool) {
	cfg := sysctl.Config{ProcRoot: o.procRoot, Dir: o.sysctlDir}
	var (
		rep sysctl.Report
		err error
	)
	switch o.sysctlMode {
	case "off":
		return rep, false
	case "apply":
		rep, err = sysctl.Apply(cfg)
	case "file":
		rep, err = sysctl.Plan(cfg)
		if err == nil {
			rep.File, err = sysctl.WriteFile(o.sysctlDir, rep.Keys)
		}
	}
	for _, k := range rep.Keys {
		lvl := slog.LevelInfo
		switch k.Action {
		case sysctl.CannotWrite, sysctl.Malformed, sysctl.CannotRead:
			lvl = slog.LevelWarn
		}
		log.Log(context.Background(), lvl, "sysctl", "key", k.Key, "found", k.Found, "target", k.Target,
			"action", string(k.Action), "reason", k.Reason)
	}
	if err != nil {
		log.Error("sysctl: sizing the kernel failed", "mode", o.sysctlMode, "err", err)
	}
	switch {
	case rep.File == "":
	case o.sysctlMode == "file":
		// Told not to set them: nothing failed.
		log.Info("sysctl: wrote the kernel values to raise to the file, as -sysctl file asks, and set none; to apply them copy the file to /etc/sysctl.d/, run sudo sysctl --system, restart the agent",
			"file", rep.File)
	default:
		log.Warn("sysctl: some kernel values could not be set here; copy the file to /etc/sysctl.d/, run sudo sysctl --system, restart the agent",
			"file", rep.File)
	}
	return rep, true
}

// once prints one reading: the second of two taken a second apart, so its
// deltas (drops, link rates) are real.
func once(ctx context.Context, cfg probe.Config, stdout, stderr io.Writer) int {
	p, err := probe.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "proofkit-agent: %v\n", err)
		return 1
	}
	defer p.Close()
	if _, err := p.Read(ctx); err != nil {
		fmt.Fprintf(stderr, "proofkit-agent: %v\n", err)
		return 1
	}
	select {
	case <-ctx.Done():
		return 0
	case <-time.After(time.Second):
	}
	r, err := p.Read(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "proofkit-agent: %v\n", err)
		return 1
	}
	if err := r.Validate(); err != nil {
		fmt.Fprintf(stderr, "proofkit-agent: %v\n", err)
		return 1
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "proofkit-agent: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}

var _ agent.Source = (*probe.Probe)(nil)
