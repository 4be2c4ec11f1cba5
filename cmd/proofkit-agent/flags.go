package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/proofkit/nodekit/agent"
	"github.com/proofkit/nodekit/internal/cmdkit"
	"github.com/proofkit/nodekit/internal/procfile"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/sysctl"
)

// options are the parsed flags.
type options struct {
	node       string
	interval   time.Duration
	reportURL  string
	requireURL bool
	tokenFile  string
	reportCA   string
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

	// origins says where each value came from, for errors.
	origins cmdkit.Origins
	// raw are the flags parsed on from a string.
	rawLinkSpeed, rawLogLevel string
}

// envPrefix is the prefix of the environment variables that stand for
// flags: PROOFKIT_AGENT_REPORT_URL for -report-url.
const envPrefix = "PROOFKIT_AGENT_"

// usageError is a bad flag or environment value: exit status 2.
type usageError = cmdkit.UsageError

// flagSet declares the flags into o.
func flagSet(o *options) *flag.FlagSet {
	fs := cmdkit.NewFlagSet("proofkit-agent")
	fs.StringVar(&o.node, "node", "", "node name sent with each reading: 1 to 64 of A-Z a-z 0-9 . _ - (default: the host name)")
	fs.DurationVar(&o.interval, "interval", agent.DefaultInterval, "time between readings")
	fs.StringVar(&o.reportURL, "report-url", "", "platform URL each reading is POSTed to as JSON (default: none, standalone); a documentation placeholder (platform.example, any host under .example or .invalid, example.com/.net/.org) is refused")
	fs.BoolVar(&o.requireURL, "require-report", false, "refuse to start without a report URL (-report-url or "+envPrefix+"REPORT_URL): for a node that must report, such as one started by the packaged unit")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the platform's bearer token (required with -report-url)")
	fs.StringVar(&o.reportCA, "report-ca", "", "PEM file of the CA certificates to trust for an https -report-url, instead of the system's")
	fs.StringVar(&o.stateDir, "state-dir", "state", "directory for the tracker's state and the report queue, relative to the working directory unless absolute")
	fs.IntVar(&o.queueMax, "queue-max", agent.DefaultQueueMax, "most reports kept while the platform does not answer (oldest dropped beyond)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:9464", `address for the page at / and /metrics, /status, /events, /healthz, /readyz ("off" for none)`)
	fs.StringVar(&o.sysctlMode, "sysctl", "apply", "at start: apply (raise kernel values, file for what cannot be set), file (only write the file), off")
	fs.StringVar(&o.sysctlDir, "sysctl-dir", "config", "directory for "+sysctl.FileName+", relative to the working directory unless absolute")
	fs.BoolVar(&o.once, "once", false, "take one reading (two, a second apart, for real deltas), print it as JSON and exit")
	fs.StringVar(&o.procRoot, "proc", "/proc", "procfs root (a host's /proc mounted in a container)")
	fs.StringVar(&o.sysRoot, "sys", "/sys", "sysfs root (a host's /sys mounted in a container)")
	fs.StringVar(&o.netns, "netns", "", "network namespace to read connections and links from, e.g. /var/run/netns/x (default: the agent's own)")
	fs.StringVar(&o.rawLinkSpeed, "link-speed", "", "link speeds the kernel does not know, in Mbit/s: eth0=1000,wg0=10000 (suffix G for Gbit/s: eth0=10G)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.rawLogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&o.version, "version", false, "print the version, commit and Go version and exit")
	fs.BoolVar(&o.healthcheck, "healthcheck", false, "ask the agent running at -listen for /healthz; exit 0 if healthy, else 1 (for a container's HEALTHCHECK)")
	return fs
}

// parseFlags parses the command line, and the environment for the flags
// the command line does not give.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	return parseFlagsEnv(args, stderr, os.LookupEnv)
}

func parseFlagsEnv(args []string, stderr io.Writer, lookupEnv func(string) (string, bool)) (options, error) {
	var o options
	fs := flagSet(&o)
	// -version on the command line answers whatever the environment
	// holds: it is what one runs to see which agent a broken set-up has.
	origins, err := cmdkit.Parse(fs, args, envPrefix, lookupEnv, func() bool { return o.version })
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stderr, "usage: proofkit-agent [flags]\n\nEvery flag but -version may also be set in the environment as %s<NAME>\n(-report-url as %s, -require-report as %s=true);\na flag given on the command line wins over its variable.\n\n",
			envPrefix, cmdkit.EnvName(envPrefix, "report-url"), cmdkit.EnvName(envPrefix, "require-report"))
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return o, err
	}
	if err != nil || o.version {
		return o, err
	}
	o.origins = origins
	if err := o.check(); err != nil {
		var ue usageError
		if !errors.As(err, &ue) {
			err = usageError{Msg: err.Error()}
		}
		return o, err
	}
	return o, nil
}

// check checks what only the command decides (the library checks the
// rest when the agent starts: see configError) and parses the flags given
// as strings.
func (o *options) check() error {
	f := o.origins
	// On the command line 0 is a value, not the library's "default".
	if o.interval <= 0 {
		return f.Errorf("interval", o.interval, "must be positive")
	}
	if o.interval < minInterval || o.interval > maxInterval {
		return f.Errorf("interval", o.interval, "want 100ms to 5m (the platform expects 30s)")
	}
	if o.queueMax < 1 {
		return f.Errorf("queue-max", o.queueMax, "must be 1 or more")
	}
	if o.queueMax > maxQueueMax {
		return f.Errorf("queue-max", o.queueMax, "want 1 to %d (a day of readings at the default interval)", maxQueueMax)
	}
	if o.node != "" {
		// Refused whether the agent reports or not: the name is on its
		// page, in its state and in each reading it would report later.
		// The host's name, taken when -node is empty, is the agent's to
		// check when it reports (see configError).
		if err := overload.CheckNode(o.node); err != nil {
			return f.Errorf("node", o.node, "want %s, as the platform takes", overload.NodeRule)
		}
	}
	switch o.sysctlMode {
	case "apply", "file", "off":
	default:
		return f.Errorf("sysctl", o.sysctlMode, "want apply, file or off")
	}
	level, err := f.ParseLogFlags(o.logFormat, o.rawLogLevel)
	if err != nil {
		return err
	}
	o.logLevel = level
	// -healthcheck runs with the agent's environment and only asks its
	// /healthz: the report URL is not its business.
	if host, ok := placeholderURL(o.reportURL); ok && !o.healthcheck {
		// Redacted: a password in the URL must not reach the journal.
		return f.Errorf("report-url", agent.RedactURL(o.reportURL), "%s is a placeholder from the documentation, a name reserved for examples; give your platform's report URL", host)
	}
	if o.requireURL && o.reportURL == "" && !o.healthcheck {
		return usageError{Msg: fmt.Sprintf("no report URL: give -report-url or %s (%s is set: this node must report; a packaged install reads the variable from /etc/default/proofkit-agent)",
			cmdkit.EnvName(envPrefix, "report-url"), f.Name("require-report"))}
	}
	if o.reportURL != "" && o.tokenFile == "" {
		return errors.New("-report-url needs -token-file (the token is never given as a flag value)")
	}
	// An empty -listen (PROOFKIT_AGENT_LISTEN= in a settings file) is
	// not taken for off: that is said as off.
	if o.listen == "" {
		return f.Errorf("listen", o.listen, "is empty; want host:port, or off for none")
	}
	if o.listen == "off" {
		o.listen = ""
	}
	if o.healthcheck {
		if o.listen == "" {
			return errors.New("-healthcheck: -listen is off, so there is no /healthz to ask")
		}
		return nil
	}
	if err := checkListen(o.listen); err != nil {
		return f.Errorf("listen", o.listen, "want host:port or off")
	}
	if o.stateDir == "" && !o.once {
		return f.Errorf("state-dir", o.stateDir, "is empty")
	}
	if o.linkSpeed, err = parseLinkSpeeds(o.rawLinkSpeed); err != nil {
		return f.Errorf("link-speed", o.rawLinkSpeed, "%v", err)
	}
	return checkRoots(*o)
}

// Bounds of -interval and -queue-max.
const (
	// minInterval is the shortest -interval. A reading takes a few
	// milliseconds and a write of the state; an interval near that keeps
	// a CPU busy, writes the disk without pause and has /healthz (no
	// reading for three intervals) fail between two readings.
	minInterval = 100 * time.Millisecond
	// maxInterval is the longest -interval: the platform's rules act in
	// steps of 5 minutes (a route in use moved every 5 minutes once an
	// overload has lasted 15), and the 3-of-5 window would take longer
	// than that to see an overload.
	maxInterval = 5 * time.Minute
	// maxQueueMax is the largest -queue-max: a day of readings at the
	// default interval. The queue is held in memory (a report is about
	// 1 KiB, up to 60 KiB with many listeners) under the unit's 64 MiB.
	maxQueueMax = 2880
)

// placeholderZones are the names reserved for documentation and for
// names that must never resolve (RFC 2606, RFC 6761): a report URL on
// one of them, or under one, was copied from an example and never edited.
var placeholderZones = []string{"example", "invalid", "example.com", "example.net", "example.org"}

// placeholderURL returns the host of rawURL and true when that host is a
// documentation placeholder (platform.example, any host under .example
// or .invalid, example.com, .net or .org and the hosts under them).
func placeholderURL(rawURL string) (host string, ok bool) {
	if rawURL == "" {
		return "", false
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", false // the agent says what is wrong with it
	}
	host = strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	for _, z := range placeholderZones {
		if host == z || strings.HasSuffix(host, "."+z) {
			return host, true
		}
	}
	return host, false
}

// checkListen checks a -listen that is not off.
func checkListen(listen string) error {
	if listen == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(listen)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	return err
}

// configFlags names the flag of each agent.Config field the command sets.
var configFlags = map[string]string{
	"Node": "node", "Interval": "interval", "QueueMax": "queue-max", "StateDir": "state-dir",
	"ReportURL": "report-url", "TokenFile": "token-file", "ReportCA": "report-ca",
}

// configError is err, from agent.New, with a refused Config field named
// by its flag.
func configError(err error, o options) error {
	var sd *agent.StateDirError
	if errors.As(err, &sd) {
		return fmt.Errorf("%s %s: %w", o.origins.Name("state-dir"), sd.Dir, sd.Err)
	}
	var ce *agent.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	name, ok := configFlags[ce.Field]
	if !ok {
		return err
	}
	if ce.Field == "Node" && !o.origins.Given("node") {
		return fmt.Errorf("-node not given, and the host name %q is not a node name the platform takes (%s); give -node",
			o.node, "want 1 to 64 of A-Z a-z 0-9 . _ -, not starting with . _ -")
	}
	return fmt.Errorf("%s %s: %s", o.origins.Name(name), ce.Value, ce.Want)
}

// checkRoots catches a -proc, -sys or -netns that points at the wrong
// place before the agent starts, so an operator sees one line and exit
// status 2 rather than an agent that logs a failed reading every interval.
func checkRoots(o options) error {
	for _, root := range []struct{ name, path string }{{"proc", o.procRoot}, {"sys", o.sysRoot}} {
		if root.path == "" {
			return o.origins.Errorf(root.name, root.path, "is empty; want the mount point of a %sfs, such as /%s", root.name, root.name)
		}
	}
	for _, f := range []string{"meminfo", "loadavg"} {
		if fi, err := os.Stat(filepath.Join(o.procRoot, f)); err != nil || fi.IsDir() {
			return usageError{Msg: fmt.Sprintf("%s %s: no %s there; want the mount point of a procfs, such as /proc", o.origins.Name("proc"), o.procRoot, f)}
		}
	}
	if fi, err := os.Stat(o.sysRoot); err != nil || !fi.IsDir() {
		return usageError{Msg: fmt.Sprintf("%s %s: not a directory; want the mount point of a sysfs, such as /sys", o.origins.Name("sys"), o.sysRoot)}
	}
	if o.netns != "" {
		if _, err := os.Stat(o.netns); err != nil {
			return usageError{Msg: fmt.Sprintf("%s %s: %v", o.origins.Name("netns"), o.netns, errors.Unwrap(err))}
		}
		// A namespace's file (nsfs) is a regular one to open; opening a
		// FIFO as the probe does would block the start for good.
		f, _, err := procfile.Open(context.Background(), o.netns)
		if err == nil {
			err = checkNetNS(f)
			f.Close()
		}
		if err != nil {
			return usageError{Msg: fmt.Sprintf("%s %s: %v; want a network namespace, /run/netns/NAME or /proc/PID/ns/net",
				o.origins.Name("netns"), o.netns, err)}
		}
	}
	return nil
}

// maxLinkSpeedMbps is the fastest link speed a reading may carry (100
// Tbit/s): overload's Validate refuses a reading with a faster one.
const maxLinkSpeedMbps = 100_000_000

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
		if n > maxLinkSpeedMbps/mult {
			// Every reading would carry it, and the overload rule
			// refuses such a reading whole.
			return nil, fmt.Errorf("%q: above 100 Tbit/s, faster than any link", item)
		}
		if !ifName(name) {
			return nil, fmt.Errorf("%q: %q is not a network interface name (1 to 15 bytes, not . or .., no /, : or white space)", item, name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("link %q given twice", name)
		}
		out[name] = n * mult
	}
	return out, nil
}

// ifName says whether the kernel takes name for a network interface
// (dev_valid_name): 1 to 15 bytes, not . or .., without /, : or white
// space. A speed given for another name would never apply.
func ifName(name string) bool {
	if name == "" || len(name) > 15 || name == "." || name == ".." {
		return false
	}
	return !strings.ContainsAny(name, "/: \t\n\v\f\r")
}
