package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/proofkit/nodekit/internal/cmdkit"
	"github.com/proofkit/nodekit/internal/procfile"
	"github.com/proofkit/nodekit/pinproxy"
)

// envPrefix is the environment variables' prefix: -dial-timeout is
// PINPROXY_DIAL_TIMEOUT.
const envPrefix = "PINPROXY_"

// handoffEnv names the descriptor a child started for an upgrade takes
// the hand-over from. It has the flags' prefix but is no flag, and is
// not warned about as a misspelt one.
const handoffEnv = envPrefix + "HANDOFF_FD"

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
	checkSend         []byte
	checkExpect       []byte
	checkTimeout      time.Duration
	refusedWithin     time.Duration
	refusedBytes      int64
	refusedSessions   int
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
	upgradeTimeout    time.Duration
	upgradeSocket     string
	version           bool

	// origins says where each value came from, for errors.
	origins cmdkit.Origins
	// raw are the flags parsed on from a string.
	rawUpstreams, rawSendProxy, rawLogLevel string
	rawCheckSend, rawCheckExpect            string
}

// usageError is a bad flag or environment value: exit status 2.
type usageError = cmdkit.UsageError

// flagSet declares the flags into o.
func flagSet(o *options) *flag.FlagSet {
	fs := cmdkit.NewFlagSet("pinproxy")
	fs.StringVar(&o.listen, "listen", "", "address to accept clients on, host:port (required)")
	fs.StringVar(&o.rawUpstreams, "upstreams", "", "upstreams in order of preference, host:port,host:port (this or -upstreams-file)")
	fs.StringVar(&o.upstreamsFile, "upstreams-file", "", "file of upstreams, one host:port a line, # comments; SIGHUP re-reads it")
	fs.DurationVar(&o.rebalanceInterval, "rebalance-interval", pinproxy.DefaultRebalanceInterval, "time between rebalance rounds (0 turns them off)")
	fs.IntVar(&o.rebalanceMaxMoves, "rebalance-max-moves", 1, "most connections a rebalance round moves")
	fs.DurationVar(&o.drainRemoved, "drain-removed", 0, "this long after a reload removed an upstream, move its connections, one per rebalance round (0: leave them)")
	fs.DurationVar(&o.dialTimeout, "dial-timeout", pinproxy.DefaultDialTimeout, "bound on each dial to an upstream")
	fs.IntVar(&o.maxDialAttempts, "max-dial-attempts", pinproxy.DefaultMaxDialAttempts, "most upstreams a client's dials try before the client is closed (negative: every upstream)")
	fs.DurationVar(&o.checkInterval, "check-interval", 0, "time between active health checks: a connect, and the -check-expect exchange if given (0: off, health from clients' dials and sessions)")
	fs.IntVar(&o.checkRise, "check-rise", pinproxy.DefaultCheckRise, "checks in a row that must answer to mark a down upstream up")
	fs.IntVar(&o.checkFall, "check-fall", pinproxy.DefaultCheckFall, "checks in a row that must fail to mark an upstream down")
	fs.StringVar(&o.rawCheckSend, "check-send", "", "bytes a test-connect (health check, rebalance) sends once connected: hex, or @FILE for a file's bytes")
	fs.StringVar(&o.rawCheckExpect, "check-expect", "", "bytes a test-connect's reply must begin with (hex, or @FILE); turns the exchange on")
	fs.DurationVar(&o.checkTimeout, "check-timeout", 0, "bound on a test-connect's exchange after the connect (0: -dial-timeout)")
	fs.DurationVar(&o.refusedWithin, "refused-within", pinproxy.DefaultRefusedWithin, "a session the upstream ends within this time of the dial is refused (0: never)")
	fs.Int64Var(&o.refusedBytes, "refused-bytes", pinproxy.DefaultRefusedBytes, "a session the upstream ends within -refused-within having sent at most this many bytes is refused")
	fs.IntVar(&o.refusedSessions, "refused-sessions", pinproxy.DefaultRefusedSessions, "refused sessions in a row, none held since, that make an upstream refusing sessions: tried last")
	fs.DurationVar(&o.slowStart, "slow-start", 0, "ramp a returning upstream's share of new clients over this time (0: off)")
	o.parkAfter = pinproxy.DefaultParkAfter
	fs.Var((*orNever)(&o.parkAfter), "park-after", "park a connection idle both ways for this `duration`: no goroutine, no buffer (Linux; never, or negative such as -1: never)")
	fs.StringVar(&o.rawSendProxy, "send-proxy", "", "send a PROXY protocol header to upstreams: v1 or v2 (default: none)")
	fs.IntVar(&o.maxConns, "max-conns", 0, "most client connections at once; over it a new client is closed at once (0: no limit; default: from the open-file limit)")
	fs.StringVar(&o.admin, "admin", "", "address for /metrics, /status, /healthz and /readyz, host:port (default: off)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.rawLogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&o.logConnections, "log-connections", true, "log each connection's end at info level (false: at debug)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long to wait for live connections before closing them")
	fs.DurationVar(&o.upgradeTimeout, "upgrade-timeout", 10*time.Second, "on SIGUSR2, how long the new binary has to take every connection and report ready before the upgrade is rolled back")
	fs.StringVar(&o.upgradeSocket, "upgrade-socket", "", "Unix socket path: hand everything to a process that connects here, and at start take it from one listening here (default: SIGUSR2 only)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	return fs
}

// parseFlags parses the command line, and the environment for the flags
// the command line does not give (all but -version).
func parseFlags(args []string, lookupEnv func(string) (string, bool), stderr io.Writer) (options, error) {
	var o options
	fs := flagSet(&o)
	origins, err := cmdkit.Parse(fs, args, envPrefix, lookupEnv, func() bool { return o.version })
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stderr, "usage: pinproxy -listen host:port -upstreams host:port[,host:port...] [flags]\n\n")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nEach flag but -version may be set in the environment as %sNAME (e.g. %s); flags win.\n",
			envPrefix, cmdkit.EnvName(envPrefix, "upstreams"))
		return o, err
	}
	if err != nil || o.version {
		return o, err
	}
	o.origins = origins
	// One of -upstreams and -upstreams-file given on the command line
	// wins over the other from the environment.
	switch f := o.origins; {
	case f.Given("upstreams") && !f.FromEnv("upstreams") && f.FromEnv("upstreams-file"):
		o.upstreamsFile = ""
	case f.Given("upstreams-file") && !f.FromEnv("upstreams-file") && f.FromEnv("upstreams"):
		o.rawUpstreams = ""
	}
	if err := o.check(lookupEnv); err != nil {
		return o, usageError{Msg: err.Error()}
	}
	return o, nil
}

// check checks what only the command decides (pinproxy.New checks the
// rest: see configError) and parses the flags given as strings.
func (o *options) check(lookupEnv func(string) (string, bool)) error {
	if err := o.checkAddrs(lookupEnv); err != nil {
		return err
	}
	if err := o.parseUpstreams(); err != nil {
		return err
	}
	if err := o.checkDurations(); err != nil {
		return err
	}
	if err := o.checkCounts(); err != nil {
		return err
	}
	level, err := cmdkit.ParseLogFlags(o.logFormat, o.rawLogLevel)
	if err != nil {
		return err
	}
	o.logLevel = level
	o.maxConnsFrom = "-max-conns"
	if !o.origins.Given("max-conns") {
		if n, ok := fileLimit(); ok {
			o.maxConns = pinproxy.MaxConnsForFiles(n)
			o.maxConnsFrom = fmt.Sprintf("RLIMIT_NOFILE %d", n)
		}
	}
	return nil
}

// checkAddrs checks -listen and -admin.
func (o *options) checkAddrs(lookupEnv func(string) (string, bool)) error {
	f := o.origins
	if _, activated := lookupEnv("LISTEN_FDS"); o.listen == "" && !activated {
		return errors.New("-listen is required (or PINPROXY_LISTEN, or a socket from systemd): the host:port to accept clients on")
	}
	if _, _, err := net.SplitHostPort(o.listen); o.listen != "" && err != nil {
		return f.Errorf("listen", o.listen, "want host:port")
	}
	if _, _, err := net.SplitHostPort(o.admin); o.admin != "" && err != nil {
		return f.Errorf("admin", o.admin, "want host:port")
	}
	return nil
}

// parseUpstreams sets o.upstreams from -upstreams or -upstreams-file.
func (o *options) parseUpstreams() error {
	raw := strings.TrimSpace(o.rawUpstreams)
	switch {
	case o.upstreamsFile != "" && raw != "":
		return errors.New("-upstreams and -upstreams-file: give one, not both")
	case o.upstreamsFile != "":
		ups, err := readUpstreams(o.origins.Name("upstreams-file"), o.upstreamsFile)
		o.upstreams = ups
		return err
	case raw == "":
		return errors.New("-upstreams is required (or PINPROXY_UPSTREAMS, or -upstreams-file): at least one host:port")
	}
	for i, u := range strings.Split(o.rawUpstreams, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			return o.origins.Errorf("upstreams", o.rawUpstreams, "entry %d is empty", i+1)
		}
		o.upstreams = append(o.upstreams, u)
	}
	return nil
}

// checkDurations checks the durations where the command's 0 is not the
// library's "default".
func (o *options) checkDurations() error {
	f := o.origins
	switch {
	case o.rebalanceInterval < 0:
		return f.Errorf("rebalance-interval", o.rebalanceInterval, "must not be negative (0 turns rounds off)")
	case o.drainRemoved < 0:
		return f.Errorf("drain-removed", o.drainRemoved, "must not be negative (0: leave removed upstreams' connections)")
	case o.dialTimeout <= 0:
		return f.Errorf("dial-timeout", o.dialTimeout, "must be positive")
	case o.checkInterval < 0:
		return f.Errorf("check-interval", o.checkInterval, "must not be negative (0: off)")
	case o.parkAfter == 0:
		return f.Errorf("park-after", o.parkAfter, "give how long a connection waits before it parks, or a negative duration for never")
	case o.slowStart < 0:
		return f.Errorf("slow-start", o.slowStart, "must not be negative (0: off)")
	case o.refusedWithin < 0:
		return f.Errorf("refused-within", o.refusedWithin, "must not be negative (0: no session counts as refused)")
	case o.shutdownTimeout < 0:
		return f.Errorf("shutdown-timeout", o.shutdownTimeout, "must not be negative")
	case o.upgradeTimeout <= 0:
		return f.Errorf("upgrade-timeout", o.upgradeTimeout, "must be positive")
	}
	return nil
}

// checkCounts checks the counts where the command's 0 is not the
// library's "default", and parses -send-proxy.
func (o *options) checkCounts() error {
	f := o.origins
	switch {
	case o.rebalanceMaxMoves < 1:
		return f.Errorf("rebalance-max-moves", o.rebalanceMaxMoves, "must be at least 1")
	case o.maxDialAttempts == 0:
		return f.Errorf("max-dial-attempts", 0, "give how many upstreams a client may try, or a negative number for every one")
	case o.checkRise < 1:
		return f.Errorf("check-rise", o.checkRise, "must be at least 1")
	case o.checkFall < 1:
		return f.Errorf("check-fall", o.checkFall, "must be at least 1")
	case o.refusedSessions < 1:
		return f.Errorf("refused-sessions", o.refusedSessions, "must be at least 1")
	}
	var err error
	if o.checkSend, err = checkBytes(f, "check-send", o.rawCheckSend); err != nil {
		return err
	}
	if o.checkExpect, err = checkBytes(f, "check-expect", o.rawCheckExpect); err != nil {
		return err
	}
	if len(o.checkSend) > 0 && len(o.checkExpect) == 0 {
		return f.Errorf("check-send", o.rawCheckSend, "needs -check-expect: a check must expect a reply")
	}
	switch o.rawSendProxy {
	case "":
	case "v1":
		o.sendProxy = 1
	case "v2":
		o.sendProxy = 2
	default:
		return f.Errorf("send-proxy", o.rawSendProxy, "want v1 or v2")
	}
	return nil
}

// configFlags are the flags of the Config fields pinproxy.New checks.
var configFlags = map[string]string{
	"DialTimeout":       "dial-timeout",
	"MaxConns":          "max-conns",
	"RebalanceMaxMoves": "rebalance-max-moves",
	"CheckRise":         "check-rise",
	"CheckFall":         "check-fall",
	"SendProxy":         "send-proxy",
	"CheckSend":         "check-send",
	"CheckTimeout":      "check-timeout",
	"RefusedBytes":      "refused-bytes",
	"RefusedSessions":   "refused-sessions",
}

// configError is err, from pinproxy.New, with a refused Config field or
// upstream named by its flag.
func configError(err error, o options) error {
	var ue *pinproxy.UpstreamError
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %s", o.origins.Name("upstreams"), ue.Detail())
	}
	var ce *pinproxy.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	name, ok := configFlags[ce.Field]
	if !ok {
		return err
	}
	return fmt.Errorf("%s %s: %s", o.origins.Name(name), ce.Value, ce.Want)
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

// Bounds on the files flags name. A file is read whole, once, at start (and
// the upstreams file at each SIGHUP); a FIFO, a device or a directory is
// refused, never waited on: a FIFO nobody writes would block the start,
// or a reload and with it every signal after it, and /dev/zero would
// never end.
const (
	// maxUpstreamsFile holds some 30,000 upstreams: far more than a proxy
	// of a few nodes lists.
	maxUpstreamsFile = 1 << 20
	// maxCheckFile holds a P2P handshake many times over (Bitcoin's
	// version and verack: 150 bytes).
	maxCheckFile = 64 << 10
)

// checkBytes parses -check-send or -check-expect: hex digits (spaces
// between them are ignored), or @FILE for the bytes of a file.
func checkBytes(f cmdkit.Origins, name, raw string) ([]byte, error) {
	if path, ok := strings.CutPrefix(raw, "@"); ok {
		b, _, err := procfile.Read(context.Background(), path, maxCheckFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(name), err)
		}
		if len(b) == 0 {
			return nil, f.Errorf(name, raw, "the file is empty")
		}
		return b, nil
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(raw), ""))
	if err != nil {
		return nil, f.Errorf(name, raw, "want hex digits or @FILE: %v", err)
	}
	return b, nil
}

// readUpstreams reads an upstreams file; the error names the flag as
// name, the file and, for a bad entry, its line.
func readUpstreams(name, path string) ([]string, error) {
	b, _, err := procfile.Read(context.Background(), path, maxUpstreamsFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	ups, err := pinproxy.ParseUpstreams(bytes.NewReader(b))
	var ue *pinproxy.UpstreamError
	switch {
	case errors.As(err, &ue):
		return nil, fmt.Errorf("%s %s: %s", name, path, ue.Detail())
	case errors.Is(err, pinproxy.ErrNoUpstreams):
		return nil, fmt.Errorf("%s %s: no upstreams in it: at least one host:port line is required", name, path)
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w", name, path, err)
	}
	return ups, nil
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
		CheckSend:         o.checkSend,
		CheckExpect:       o.checkExpect,
		CheckTimeout:      o.checkTimeout,
		RefusedWithin:     o.refusedWithin,
		RefusedBytes:      o.refusedBytes,
		RefusedSessions:   o.refusedSessions,
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
	if o.refusedWithin == 0 {
		cfg.RefusedWithin = -1 // off, as for the rounds
	}
	return cfg
}
