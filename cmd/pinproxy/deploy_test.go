package main

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The proxy's files in examples/deploy are what operators copy. These
// tests keep their command lines in step with the binary's flags: each
// must parse as the proxy parses its own (the example upstreams file
// included), and the systemd unit must pass systemd-analyze verify.

const deployDir = "../../examples/deploy"

func readDeploy(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// unitLine returns the value of the unit's first key= line, its
// backslash continuations joined.
func unitLine(t *testing.T, unit, key string) string {
	t.Helper()
	joined := strings.ReplaceAll(unit, "\\\n", " ")
	for line := range strings.SplitSeq(joined, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+"="); ok {
			return v
		}
	}
	t.Fatalf("pinproxy.service: no %s= line", key)
	return ""
}

// noEnv is an empty environment, so the files' flags are all there is.
func noEnv(string) (string, bool) { return "", false }

// exampleUpstreams replaces the deployed upstreams file's path with the
// example file's.
var exampleUpstreams = strings.NewReplacer("/etc/pinproxy/upstreams", filepath.Join(deployDir, "pinproxy-upstreams"))

func TestDeployUnitFlags(t *testing.T) {
	unit := readDeploy(t, "pinproxy.service")
	args := strings.Fields(unitLine(t, unit, "ExecStart"))
	if args[0] != "/usr/local/bin/pinproxy" {
		t.Errorf("ExecStart runs %s, want /usr/local/bin/pinproxy (where the unit's comment installs it)", args[0])
	}
	for i, a := range args {
		args[i] = exampleUpstreams.Replace(a)
	}
	o, err := parseFlags(args[1:], noEnv, io.Discard)
	if err != nil {
		t.Fatalf("the unit's ExecStart does not parse: %v\nargs: %q", err, args[1:])
	}
	if o.upstreamsFile == "" || len(o.upstreams) != 2 {
		t.Errorf("the unit reads upstreams %q from %q, want the example file's two", o.upstreams, o.upstreamsFile)
	}
	if got := unitLine(t, unit, "ExecReload"); got != "/bin/kill -HUP $MAINPID" {
		t.Errorf("ExecReload=%s, want SIGHUP to the proxy", got)
	}
	// systemd must wait out the drain before it kills.
	if !strings.Contains(unit, "TimeoutStopSec=45") || o.shutdownTimeout.Seconds() >= 45 {
		t.Errorf("TimeoutStopSec must exceed -shutdown-timeout %v", o.shutdownTimeout)
	}
}

func TestDeployUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("skipping: systemd-analyze not installed")
	}
	// verify checks that ExecStart's binary exists: point it at the one
	// TestMain built.
	unit := strings.Replace(readDeploy(t, "pinproxy.service"), "ExecStart=/usr/local/bin/pinproxy", "ExecStart="+binary, 1)
	path := filepath.Join(t.TempDir(), "pinproxy.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func TestDeployDockerFlags(t *testing.T) {
	dockerfile := strings.ReplaceAll(readDeploy(t, "pinproxy.Dockerfile"), "\\\n", " ")
	m := regexp.MustCompile(`(?m)^ENTRYPOINT\s+(\[.*\])\s*$`).FindStringSubmatch(dockerfile)
	if m == nil {
		t.Fatal("pinproxy.Dockerfile: no ENTRYPOINT [...] line")
	}
	var args []string
	if err := json.Unmarshal([]byte(m[1]), &args); err != nil {
		t.Fatalf("pinproxy.Dockerfile ENTRYPOINT %s: %v", m[1], err)
	}
	if args[0] != "/usr/local/bin/pinproxy" || !strings.Contains(dockerfile, "COPY --from=build /out/pinproxy /usr/local/bin/pinproxy") {
		t.Errorf("ENTRYPOINT runs %s, which the image does not hold", args[0])
	}
	if !strings.Contains(dockerfile, "COPY examples/deploy/pinproxy-upstreams /etc/pinproxy/upstreams") {
		t.Error("the image does not hold the upstreams file its ENTRYPOINT names")
	}
	for i, a := range args {
		args[i] = exampleUpstreams.Replace(a)
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
