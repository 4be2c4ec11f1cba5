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
//	proofkit-agent -report-url https://platform.example/api/v1/readings \
//	    -token-file /etc/proofkit-agent/token -state-dir /var/lib/proofkit-agent
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
// Exit status: 0 on SIGTERM or SIGINT (state saved) and after -once; 2 for
// a bad flag (a -proc without meminfo, a flag whose value is missing), an
// unreadable token file or an unwritable state directory, with one line
// on stderr saying why; 1 when the agent cannot run (no probe on this
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
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/proofkit/nodekit/agent"
	"github.com/proofkit/nodekit/internal/buildinfo"
	"github.com/proofkit/nodekit/internal/cmdkit"
	"github.com/proofkit/nodekit/internal/sdnotify"
	"github.com/proofkit/nodekit/overload/probe"
	"github.com/proofkit/nodekit/sysctl"
)

// stopGrace is how long the agent may take to stop after SIGTERM or
// SIGINT before it exits anyway (status 1), whatever it is blocked on (a
// probe read of a file that never answers, a disk that does not).
const stopGrace = 900 * time.Millisecond

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		<-ctx.Done()
		time.Sleep(stopGrace)
		fmt.Fprintf(os.Stderr, "proofkit-agent: did not stop within %v of the signal; exiting without waiting\n", stopGrace)
		os.Exit(1)
	}()
	// Caught from the start: SIGHUP's default action would end the agent.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, hup)
	signal.Stop(hup)
	stop()
	os.Exit(code)
}

// options are the parsed flags.
type options struct {
	node       string
	interval   time.Duration
	reportURL  string
	tokenFile  string
	stateDir   string
	queueMax   int
	listen     string
	sysctlMode string
	sysctlDir  string
	once       bool
	procRoot   string
	sysRoot    string
	netns      string
	linkSpeed  map[string]uint64
	logFormat  string
	logLevel   slog.Level

	version     bool
	healthcheck bool
}

// envPrefix is the prefix of the environment variables that stand for
// flags: PROOFKIT_AGENT_REPORT_URL for -report-url.
const envPrefix = "PROOFKIT_AGENT_"

// usageError is a bad flag: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// parseFlags parses the command line, and the environment for the flags
// the command line does not give.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	return parseFlagsEnv(args, stderr, os.LookupEnv)
}

func parseFlagsEnv(args []string, stderr io.Writer, lookupEnv func(string) (string, bool)) (options, error) {
	var o options
	fs := flag.NewFlagSet("proofkit-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.node, "node", "", "node name sent with each reading (default: the host name)")
	fs.DurationVar(&o.interval, "interval", agent.DefaultInterval, "time between readings")
	fs.StringVar(&o.reportURL, "report-url", "", "platform URL each reading is POSTed to as JSON (default: none, standalone)")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the platform's bearer token (required with -report-url)")
	fs.StringVar(&o.stateDir, "state-dir", "state", "directory for the tracker's state and the report queue, relative to the working directory unless absolute")
	fs.IntVar(&o.queueMax, "queue-max", agent.DefaultQueueMax, "most reports kept while the platform does not answer (oldest dropped beyond)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:9464", `address for /metrics, /status and /events ("off" for none)`)
	fs.StringVar(&o.sysctlMode, "sysctl", "apply", "at start: apply (raise kernel values, file for what cannot be set), file (only write the file), off")
	fs.StringVar(&o.sysctlDir, "sysctl-dir", "config", "directory for "+sysctl.FileName+", relative to the working directory unless absolute")
	fs.BoolVar(&o.once, "once", false, "take one reading (two, a second apart, for real deltas), print it as JSON and exit")
	fs.StringVar(&o.procRoot, "proc", "/proc", "procfs root (a host's /proc mounted in a container)")
	fs.StringVar(&o.sysRoot, "sys", "/sys", "sysfs root (a host's /sys mounted in a container)")
	fs.StringVar(&o.netns, "netns", "", "network namespace to read connections and links from, e.g. /var/run/netns/x (default: the agent's own)")
	linkSpeed := fs.String("link-speed", "", "link speeds the kernel does not know, in Mbit/s: eth0=1000,wg0=10000 (suffix G for Gbit/s: eth0=10G)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&o.version, "version", false, "print the version, commit and Go version and exit")
	fs.BoolVar(&o.healthcheck, "healthcheck", false, "ask the agent running at -listen for /healthz; exit 0 if healthy, else 1 (for a container's HEALTHCHECK)")
	fs.Usage = func() {} // a bad flag is one line on stderr; -h prints the flags
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "usage: proofkit-agent [flags]\n\nEvery flag but -version may also be set in the environment as %s<NAME>\n(-report-url as %s); the command line wins.\n\n",
				envPrefix, cmdkit.EnvName(envPrefix, "report-url"))
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return o, err
		}
		return o, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return o, usageError{fmt.Sprintf("unexpected argument %q (flags only)", fs.Arg(0))}
	}
	// -version on the command line answers whatever the environment
	// holds: it is what one runs to see which agent a broken set-up has.
	if o.version {
		return o, nil
	}
	if err := cmdkit.FromEnv(fs, envPrefix, lookupEnv); err != nil { // all but -version
		return o, usageError{err.Error()}
	}
	// "-node -once" sets the node to "-once" and runs the agent for good,
	// sysctl and all: a value that is one of our own flags is a missing
	// value, not a name.
	var swallowed error
	fs.Visit(func(f *flag.Flag) {
		v := f.Value.String()
		name, _, _ := strings.Cut(strings.TrimLeft(v, "-"), "=")
		if swallowed == nil && strings.HasPrefix(v, "-") && name != "" && fs.Lookup(name) != nil {
			swallowed = usageError{fmt.Sprintf("-%s %q: a value is missing (%s is a flag)", f.Name, v, v)}
		}
	})
	if swallowed != nil {
		return o, swallowed
	}
	if o.interval <= 0 {
		return o, usageError{fmt.Sprintf("-interval %v: must be positive", o.interval)}
	}
	if o.queueMax < 1 {
		return o, usageError{fmt.Sprintf("-queue-max %d: must be 1 or more", o.queueMax)}
	}
	switch o.sysctlMode {
	case "apply", "file", "off":
	default:
		return o, usageError{fmt.Sprintf("-sysctl %q: want apply, file or off", o.sysctlMode)}
	}
	level, err := cmdkit.ParseLogFlags(o.logFormat, *logLevel)
	if err != nil {
		return o, usageError{err.Error()}
	}
	o.logLevel = level
	if o.reportURL != "" {
		u, err := url.Parse(o.reportURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return o, usageError{fmt.Sprintf("-report-url %q: want an http:// or https:// URL", agent.RedactURL(o.reportURL))}
		}
		if o.tokenFile == "" {
			return o, usageError{"-report-url needs -token-file (the token is never given as a flag value)"}
		}
	}
	if o.listen == "off" {
		o.listen = ""
	}
	if o.healthcheck {
		if o.listen == "" {
			return o, usageError{"-healthcheck: -listen is off, so there is no /healthz to ask"}
		}
		return o, nil
	}
	if o.listen != "" {
		_, port, err := net.SplitHostPort(o.listen)
		if err == nil {
			_, err = net.LookupPort("tcp", port)
		}
		if err != nil {
			return o, usageError{fmt.Sprintf("-listen %q: want host:port or off", o.listen)}
		}
	}
	if o.stateDir == "" && !o.once {
		return o, usageError{"-state-dir is empty"}
	}
	speeds, err := parseLinkSpeeds(*linkSpeed)
	if err != nil {
		return o, usageError{fmt.Sprintf("-link-speed %q: %v", *linkSpeed, err)}
	}
	o.linkSpeed = speeds
	if err := checkRoots(o); err != nil {
		return o, err
	}
	return o, nil
}

// checkRoots catches a -proc, -sys or -netns that points at the wrong
// place before the agent starts, so an operator sees one line and exit
// status 2 rather than an agent that logs a failed reading every interval.
func checkRoots(o options) error {
	for _, f := range []string{"meminfo", "loadavg"} {
		if fi, err := os.Stat(filepath.Join(o.procRoot, f)); err != nil || fi.IsDir() {
			return usageError{fmt.Sprintf("-proc %s: no %s there; want the mount point of a procfs, such as /proc", o.procRoot, f)}
		}
	}
	if fi, err := os.Stat(o.sysRoot); err != nil || !fi.IsDir() {
		return usageError{fmt.Sprintf("-sys %s: not a directory; want the mount point of a sysfs, such as /sys", o.sysRoot)}
	}
	if o.netns != "" {
		if _, err := os.Stat(o.netns); err != nil {
			return usageError{fmt.Sprintf("-netns %s: %v", o.netns, errors.Unwrap(err))}
		}
	}
	return nil
}

// parseLinkSpeeds parses "eth0=1000,wg0=10G" (Mbit/s, or Gbit/s with G).
func parseLinkSpeeds(s string) (map[string]uint64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := make(map[string]uint64)
	for item := range strings.SplitSeq(s, ",") {
		name, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || v == "" {
			return nil, fmt.Errorf("%q: want NAME=MBITS", item)
		}
		mult := uint64(1)
		switch {
		case strings.HasSuffix(v, "G"), strings.HasSuffix(v, "g"):
			mult, v = 1000, v[:len(v)-1]
		case strings.HasSuffix(v, "M"), strings.HasSuffix(v, "m"):
			v = v[:len(v)-1]
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%q: speed is not a positive whole number", item)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("link %q given twice", name)
		}
		out[name] = n * mult
	}
	return out, nil
}

func newLogger(o options, w io.Writer) *slog.Logger {
	return cmdkit.NewLogger(w, o.logFormat == "json", o.logLevel)
}

// healthcheck asks the agent at listen for /healthz, within 5 s.
func healthcheck(listen string, stdout, stderr io.Writer) int {
	host, port, _ := net.SplitHostPort(listen)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // a wildcard listen answers on loopback too
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(host, port) + "/healthz")
	if err != nil {
		fmt.Fprintf(stderr, "proofkit-agent: healthcheck: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "proofkit-agent: healthcheck: %s: %s\n", resp.Status, strings.TrimSpace(string(body)))
		return 1
	}
	fmt.Fprintf(stdout, "%s", body)
	return 0
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
		return healthcheck(o.listen, stdout, stderr)
	}
	log := newLogger(o, stderr)

	if o.node == "" {
		h, err := os.Hostname()
		if err != nil {
			fmt.Fprintf(stderr, "proofkit-agent: no -node given and no host name: %v\n", err)
			return 2
		}
		o.node = h
	}
	pcfg := probe.Config{
		ProcRoot: o.procRoot, SysRoot: o.sysRoot, NetNS: o.netns,
		LinkSpeedMbps: o.linkSpeed, Node: o.node, Logger: log,
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

	src, now := testClock(p)
	a, err := agent.New(agent.Config{
		Node: o.node, Source: src, Now: now, Interval: o.interval,
		StateDir: o.stateDir, QueueMax: o.queueMax,
		ReportURL: o.reportURL, TokenFile: o.tokenFile,
		Logger: log,
	})
	if errors.Is(err, agent.ErrLocked) {
		fmt.Fprintf(stderr, "proofkit-agent: %v\n", err)
		return 1
	}
	if err != nil { // a bad token file or state directory
		fmt.Fprintf(stderr, "proofkit-agent: %v\n", err)
		return 2
	}
	defer a.Close() // releases the state directory's lock; the exit would too

	hupCtx, hupStop := context.WithCancel(ctx)
	hupDone := make(chan struct{})
	defer func() { hupStop(); <-hupDone }() // before Close
	go func() {
		defer close(hupDone)
		for {
			select {
			case <-hupCtx.Done():
				return
			case <-hup:
				reloadToken(a, o.tokenFile, os.Getenv("CREDENTIALS_DIRECTORY"), log)
			}
		}
	}()

	var srv *http.Server
	if o.listen != "" {
		ln, err := net.Listen("tcp", o.listen)
		if err != nil {
			fmt.Fprintf(stderr, "proofkit-agent: -listen: %v\n", err)
			return 1
		}
		srv = &http.Server{
			Handler:           a.Handler(),
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       60 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("serving /metrics stopped", "err", err)
			}
		}()
		log.Info("serving /metrics, /status and /events", "addr", ln.Addr().String())
	}

	if rep, ran := sizeKernel(o, log); ran {
		a.SetSysctl(rep)
	}

	bi := buildinfo.Read()
	log.Info("agent started", "version", bi.Version, "commit", bi.Commit, "go", bi.GoVersion,
		"node", o.node, "interval", o.interval, "state_dir", absPath(o.stateDir),
		"report_url", agent.RedactURL(o.reportURL), "queue_max", o.queueMax)
	notifyDone := notifyReady(ctx, a, o.interval, log)
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

// absPath is p made absolute, for the log: the defaults are relative to
// the working directory.
func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// notifyReady tells systemd (Type=notify) READY=1 once the agent is ready
// (its first reading taken, its state written) and STOPPING=1 when ctx
// ends; without $NOTIFY_SOCKET it does nothing. The channel closes when
// it is done.
func notifyReady(ctx context.Context, a *agent.Agent, interval time.Duration, log *slog.Logger) <-chan struct{} {
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
	if rep.File != "" {
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
