package main

import (
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/internal/testing/deploytest"
)

// The proxy's files in examples/deploy are what operators copy. These
// tests keep their command lines in step with the binary's flags: each
// must parse as the proxy parses its own (the example upstreams file
// included), and the systemd unit must pass systemd-analyze verify.

// noEnv is an empty environment, so the files' flags are all there is.
func noEnv(string) (string, bool) { return "", false }

// unitOptions returns the options the shipped unit gives the proxy: its
// ExecStart names the binary alone (a flag there would win over
// /etc/default/pinproxy and a drop-in), and its Environment= lines hold
// its settings, the upstreams file being the example's.
func unitOptions(t *testing.T, unit string) options {
	t.Helper()
	args := strings.Fields(deploytest.UnitValue(t, "pinproxy.service", unit, "ExecStart"))
	if args[0] != "/usr/local/bin/pinproxy" {
		t.Errorf("ExecStart runs %s, want /usr/local/bin/pinproxy (where the unit's comment installs it)", args[0])
	}
	if len(args) > 1 {
		t.Errorf("ExecStart gives flags %q: a flag wins over /etc/default/pinproxy and over a drop-in's Environment=; make it an Environment= line", args[1:])
	}
	env := deploytest.UnitEnvironment(t, "pinproxy.service", unit)
	for k, v := range env {
		env[k] = exampleUpstreams(t).Replace(v)
	}
	o, err := parseFlags(args[1:], func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	if err != nil {
		t.Fatalf("the unit's settings do not parse: %v\nExecStart: %q, Environment: %q", err, args, env)
	}
	return o
}

// exampleUpstreams replaces the deployed upstreams file's path with the
// example file's.
func exampleUpstreams(t *testing.T) *strings.Replacer {
	return strings.NewReplacer("/etc/pinproxy/upstreams", deploytest.Path(t, "pinproxy-upstreams"))
}

func TestDeployUnitFlags(t *testing.T) {
	unit := deploytest.Read(t, "pinproxy.service")
	o := unitOptions(t, unit)
	if o.upstreamsFile == "" || len(o.upstreams) != 2 {
		t.Errorf("the unit reads upstreams %q from %q, want the example file's two", o.upstreams, o.upstreamsFile)
	}
	// Reload upgrades in place (SIGUSR2): the new process reads the
	// upstreams file afresh, and a binary installed over the old one runs.
	if got := deploytest.UnitValue(t, "pinproxy.service", unit, "ExecReload"); got != "/bin/kill -USR2 $MAINPID" {
		t.Errorf("ExecReload=%s, want SIGUSR2 to the proxy: systemctl reload upgrades", got)
	}
	// systemd must wait out the drain before it kills.
	if !strings.Contains(unit, "TimeoutStopSec=45") || o.shutdownTimeout.Seconds() >= 45 {
		t.Errorf("TimeoutStopSec must exceed -shutdown-timeout %v", o.shutdownTimeout)
	}
}

func TestDeployUnitVerifies(t *testing.T) {
	// ExecStart is pointed at the binary TestMain built.
	deploytest.VerifyUnit(t, "pinproxy.service", "/usr/local/bin/pinproxy", binary)
}

func TestDeployDockerFlags(t *testing.T) {
	dockerfile := strings.ReplaceAll(deploytest.Read(t, "pinproxy.Dockerfile"), "\\\n", " ")
	args := deploytest.Entrypoint(t, "pinproxy.Dockerfile", dockerfile)
	if args[0] != "/usr/local/bin/pinproxy" || !strings.Contains(dockerfile, "COPY --from=build /out/pinproxy /usr/local/bin/pinproxy") {
		t.Errorf("ENTRYPOINT runs %s, which the image does not hold", args[0])
	}
	if !strings.Contains(dockerfile, "COPY examples/deploy/pinproxy-upstreams /etc/pinproxy/upstreams") {
		t.Error("the image does not hold the upstreams file its ENTRYPOINT names")
	}
	for i, a := range args {
		args[i] = exampleUpstreams(t).Replace(a)
	}
	o, err := parseFlags(args[1:], noEnv, io.Discard)
	if err != nil {
		t.Fatalf("the image's ENTRYPOINT does not parse: %v\nargs: %q", err, args[1:])
	}
	if o.listen != "0.0.0.0:9333" || len(o.upstreams) != 2 {
		t.Errorf("the image listens on %q with upstreams %q", o.listen, o.upstreams)
	}
	if !regexp.MustCompile(`(?m)^STOPSIGNAL SIGTERM$`).MatchString(dockerfile) {
		t.Error("the image does not stop with SIGTERM, which drains")
	}
}
