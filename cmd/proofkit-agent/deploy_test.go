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

// The files in examples/deploy are what operators copy. These tests keep
// their command lines in step with the binary's flags: each must parse as
// the agent parses its own, and the systemd unit must pass
// systemd-analyze verify.

const deployDir = "../../examples/deploy"

// unitExecStart returns the arguments of the unit's ExecStart= line (its
// backslash continuations joined), the binary first.
func unitExecStart(t *testing.T, unit string) []string {
	t.Helper()
	joined := strings.ReplaceAll(unit, "\\\n", " ")
	for line := range strings.SplitSeq(joined, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStart="); ok {
			return strings.Fields(v)
		}
	}
	t.Fatal("proofkit-agent.service: no ExecStart= line")
	return nil
}

func readDeploy(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDeployUnitFlags(t *testing.T) {
	args := unitExecStart(t, readDeploy(t, "proofkit-agent.service"))
	if args[0] != "/usr/local/bin/proofkit-agent" {
		t.Errorf("ExecStart runs %s, want /usr/local/bin/proofkit-agent (where the unit's comment installs it)", args[0])
	}
	// systemd sets STATE_DIRECTORY from StateDirectory=.
	state := t.TempDir()
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "${STATE_DIRECTORY}", state)
	}
	o, err := parseFlags(args[1:], io.Discard)
	if err != nil {
		t.Fatalf("the unit's ExecStart does not parse: %v\nargs: %q", err, args[1:])
	}
	if o.tokenFile == "" || o.reportURL == "" {
		t.Errorf("the unit reports nowhere: -report-url %q -token-file %q", o.reportURL, o.tokenFile)
	}
}

func TestDeployUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	// verify checks that ExecStart's binary exists: point it at the one
	// TestMain built.
	unit := strings.Replace(readDeploy(t, "proofkit-agent.service"), "ExecStart=/usr/local/bin/proofkit-agent", "ExecStart="+bin, 1)
	path := filepath.Join(t.TempDir(), "proofkit-agent.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func TestDeployDockerFlags(t *testing.T) {
	// The image's ENTRYPOINT (a JSON array over continuation lines) and
	// the compose file's command: list together are the agent's arguments.
	dockerfile := strings.ReplaceAll(readDeploy(t, "Dockerfile"), "\\\n", " ")
	m := regexp.MustCompile(`(?m)^ENTRYPOINT\s+(\[.*\])\s*$`).FindStringSubmatch(dockerfile)
	if m == nil {
		t.Fatal("Dockerfile: no ENTRYPOINT [...] line")
	}
	var entry []string
	if err := json.Unmarshal([]byte(m[1]), &entry); err != nil {
		t.Fatalf("Dockerfile ENTRYPOINT %s: %v", m[1], err)
	}
	var command []string
	in := false
	for line := range strings.SplitSeq(readDeploy(t, "docker-compose.yml"), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "command:":
			in = true
		case in && strings.HasPrefix(trimmed, "- "):
			command = append(command, strings.TrimPrefix(trimmed, "- "))
		case in && (trimmed == "" || strings.HasPrefix(trimmed, "#")):
		case in:
			in = false
		}
	}
	if len(command) == 0 {
		t.Fatal("docker-compose.yml: no command: list")
	}
	args := append(entry[1:], command...)
	// The container sees the host's /proc and /sys at /host/...; here the
	// test's own stand in, and the volumes become temporary directories.
	repl := strings.NewReplacer("/host/proc", "/proc", "/host/sys", "/sys",
		"/var/lib/proofkit-agent", t.TempDir(), "/config", t.TempDir())
	for i, a := range args {
		args[i] = repl.Replace(a)
	}
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("the image's ENTRYPOINT and compose's command do not parse: %v\nargs: %q", err, args)
	}
	if o.tokenFile != "/run/secrets/proofkit_token" {
		t.Errorf("-token-file %q, want the compose secret /run/secrets/proofkit_token", o.tokenFile)
	}
}
