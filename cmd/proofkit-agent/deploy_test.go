package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/internal/testing/deploytest"
)

// The files in examples/deploy are what operators copy. These tests keep
// their command lines in step with the binary's flags: each must parse as
// the agent parses its own, and the systemd unit must pass
// systemd-analyze verify.

// readDeploy returns the deployment file name's text.
func readDeploy(t *testing.T, name string) string { return deploytest.Read(t, name) }

// defaultFile is where the packaged unit takes the operator's settings
// from (EnvironmentFile=-/etc/default/proofkit-agent).
const defaultFile = "/etc/default/proofkit-agent"

func TestDeployUnitFlags(t *testing.T) {
	unit := readDeploy(t, "proofkit-agent.service")
	args := strings.Fields(deploytest.UnitValue(t, "proofkit-agent.service", unit, "ExecStart"))
	if args[0] != "/usr/bin/proofkit-agent" && args[0] != "/usr/local/bin/proofkit-agent" {
		t.Errorf("ExecStart runs %s, want /usr/bin/proofkit-agent (the package's) or /usr/local/bin/proofkit-agent", args[0])
	}
	if !strings.Contains(unit, "EnvironmentFile=-"+defaultFile) {
		t.Fatalf("the unit does not read %s", defaultFile)
	}
	// The agent's environment under systemd: the unit's Environment=
	// lines, then the settings file over them; the command line wins
	// over both, so the URL must not be on it, and the unit's
	// REQUIRE_REPORT makes an unedited file a clear exit 2.
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(strings.TrimLeft(a, "-"), "report-url") }) {
		t.Errorf("ExecStart gives -report-url, which would win over %s: %q", defaultFile, args)
	}
	state, sysctlDir := t.TempDir(), t.TempDir()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(file map[string]string) func(string) (string, bool) {
		vars := deploytest.UnitEnvironment(t, "proofkit-agent.service", unit)
		// The unit's absolute directories, here temporary ones.
		for k, dir := range map[string]string{"PROOFKIT_AGENT_STATE_DIR": state, "PROOFKIT_AGENT_SYSCTL_DIR": sysctlDir} {
			if _, ok := vars[k]; ok {
				vars[k] = dir
			}
		}
		for k, v := range file {
			vars[k] = v
		}
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	unedited := map[string]string{"PROOFKIT_AGENT_REPORT_URL": "", "PROOFKIT_AGENT_TOKEN_FILE": token}
	if _, err := parseFlagsEnv(args[1:], io.Discard, env(unedited)); err == nil || !strings.Contains(err.Error(), "no report URL") {
		t.Errorf("with the default file unedited: %v, want the error that says no report URL", err)
	}
	edited := map[string]string{"PROOFKIT_AGENT_REPORT_URL": "https://platform.nodekit.test/api/v1/readings", "PROOFKIT_AGENT_TOKEN_FILE": token}
	o, err := parseFlagsEnv(args[1:], io.Discard, env(edited))
	if err != nil {
		t.Fatalf("the unit with the default file edited does not parse: %v\nargs: %q", err, args[1:])
	}
	if o.reportURL != edited["PROOFKIT_AGENT_REPORT_URL"] || o.tokenFile != token {
		t.Errorf("with the default file edited: -report-url %q -token-file %q", o.reportURL, o.tokenFile)
	}
	if o.stateDir != state || o.sysctlDir != sysctlDir || o.logFormat != "json" {
		t.Errorf("the unit's settings: -state-dir %q -sysctl-dir %q -log-format %q; want its directories and json", o.stateDir, o.sysctlDir, o.logFormat)
	}
	// A setting in the file (or a drop-in's Environment=) wins over the
	// unit's own.
	edited["PROOFKIT_AGENT_LISTEN"] = "127.0.0.1:9465"
	if o, err := parseFlagsEnv(args[1:], io.Discard, env(edited)); err != nil || o.listen != "127.0.0.1:9465" {
		t.Errorf("PROOFKIT_AGENT_LISTEN=127.0.0.1:9465 in the file: -listen %q, %v", o.listen, err)
	}
}

func TestDeployUnitVerifies(t *testing.T) {
	// ExecStart is pointed at the binary TestMain built.
	deploytest.VerifyUnit(t, "proofkit-agent.service", "/usr/local/bin/proofkit-agent", bin)
}

func TestDeployDockerFlags(t *testing.T) {
	// The image's ENTRYPOINT (a JSON array over continuation lines) and
	// the compose file's command: list together are the agent's arguments.
	dockerfile := strings.ReplaceAll(readDeploy(t, "Dockerfile"), "\\\n", " ")
	entry := deploytest.Entrypoint(t, "Dockerfile", dockerfile)
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
	// The documentation's placeholder URL, which the agent refuses, stands
	// for the operator's own.
	repl := strings.NewReplacer("/host/proc", "/proc", "/host/sys", "/sys",
		"/var/lib/proofkit-agent", t.TempDir(), "/config", t.TempDir(),
		"https://platform.example/", "https://platform.nodekit.test/")
	for i, a := range args {
		args[i] = repl.Replace(a)
	}
	// The service's environment: PROOFKIT_AGENT_* stand for flags.
	svc, _ := parseCompose(t, readDeploy(t, "docker-compose.yml"), "proofkit-agent")
	lookup := func(k string) (string, bool) { v, ok := svc.env[k]; return v, ok }
	o, err := parseFlagsEnv(args, io.Discard, lookup)
	if err != nil {
		t.Fatalf("the image's ENTRYPOINT and compose's command and environment do not parse: %v\nargs: %q\nenvironment: %v", err, args, svc.env)
	}
	if o.tokenFile != "/run/secrets/proofkit_token" {
		t.Errorf("-token-file %q, want the compose secret /run/secrets/proofkit_token", o.tokenFile)
	}
	if host, _, _ := strings.Cut(o.listen, ":"); host != "127.0.0.1" {
		t.Errorf("the container listens on %q: the metrics page stays on loopback", o.listen)
	}
	flags := helpFlags(t)
	for name := range svc.env {
		flagName := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, envPrefix), "_", "-"))
		if !strings.HasPrefix(name, envPrefix) || !slices.Contains(flags, flagName) {
			t.Errorf("environment %s: not a PROOFKIT_AGENT_ variable of one of the agent's flags %v", name, flags)
		}
	}
	// The image's health check is the agent itself (no curl in the image)
	// and asks the address the environment gives.
	if !strings.Contains(dockerfile, `HEALTHCHECK `) || !strings.Contains(dockerfile, `CMD ["/usr/local/bin/proofkit-agent", "-healthcheck"]`) {
		t.Error("Dockerfile: no HEALTHCHECK running proofkit-agent -healthcheck")
	}
	for _, a := range args {
		if strings.HasPrefix(a, "-listen") {
			t.Errorf("the listen address is in the command (%s): the HEALTHCHECK would not see it; set PROOFKIT_AGENT_LISTEN", a)
		}
	}
	if !filepath.IsAbs(o.stateDir) || !filepath.IsAbs(o.sysctlDir) {
		t.Errorf("-state-dir %q, -sysctl-dir %q: the image gives absolute directories", o.stateDir, o.sysctlDir)
	}
}

// helpFlags returns the names of the flags proofkit-agent -h lists.
func helpFlags(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command(bin, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("proofkit-agent -h: %v\n%s", err, out)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(string(out), -1) {
		names = append(names, m[1])
	}
	if len(names) < 10 {
		t.Fatalf("proofkit-agent -h lists %d flags:\n%s", len(names), out)
	}
	return names
}

func TestDeployUnitNotifies(t *testing.T) {
	unit := readDeploy(t, "proofkit-agent.service")
	for _, want := range []string{"\nType=notify\n", "\nNotifyAccess=main\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("proofkit-agent.service lacks %q", strings.TrimSpace(want))
		}
	}
}

func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for _, want := range []string{".git", "**/state", "**/token"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}

// TestComposeTranslation: where no compose plugin is installed, the
// container test runs the compose file's service through docker run;
// the translation keeps every key that matters to the agent.
// TestDocsDockerRun: the docker run that docs/install.md gives for hosts
// with no compose has every setting of the compose file's service.
func TestDocsDockerRun(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(deploytest.Dir(t))), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(text), "docker run -d --name proofkit-agent ")
	block, _, ok2 := strings.Cut(block, "\ndocker ")
	if !ok || !ok2 {
		t.Fatal("docs/install.md has no docker run -d --name proofkit-agent line")
	}
	block = regexp.MustCompile(`\s*#[^\n]*`).ReplaceAllString(block, "")
	docs := strings.Fields(strings.NewReplacer("\\\n", " ", `"`, "", "$PWD", "/srv/p").Replace(block))
	svc, secrets := parseCompose(t, readDeploy(t, "docker-compose.yml"), "proofkit-agent")
	want := dockerRun(t, svc, secrets, "p", "/srv/p", "proofkit-agent", "", nil)
	want = want[slices.Index(want, "--name")+2:]
	for i := 0; i < len(want); i++ {
		switch arg := want[i]; {
		case arg == "--health-interval" || arg == "--health-start-period":
			i++ // the test's own
		case arg == "-v" && strings.HasPrefix(want[i+1], "p_"):
			// A named volume: compose names it after its project.
			i++
			target := want[i][strings.Index(want[i], ":"):]
			if !slices.ContainsFunc(docs, func(d string) bool { return strings.HasSuffix(d, target) }) {
				t.Errorf("the docs' docker run has no volume for %s:\n%s", target, strings.Join(docs, " "))
			}
		case strings.HasPrefix(arg, "-"):
			if i+1 < len(want) && !strings.HasPrefix(want[i+1], "-") && !hasPair(docs, arg, want[i+1]) {
				t.Errorf("the docs' docker run lacks %s %s:\n%s", arg, want[i+1], strings.Join(docs, " "))
			}
			if i+1 < len(want) && !strings.HasPrefix(want[i+1], "-") {
				i++
			} else if !slices.Contains(docs, arg) {
				t.Errorf("the docs' docker run lacks %s:\n%s", arg, strings.Join(docs, " "))
			}
		default:
			if !slices.Contains(docs, arg) {
				t.Errorf("the docs' docker run lacks %s:\n%s", arg, strings.Join(docs, " "))
			}
		}
	}
	if !hasPair(docs, "--restart", svc.scalars["restart"]) {
		t.Errorf("the docs' docker run lacks --restart %s", svc.scalars["restart"])
	}
}

// hasPair reports whether args holds flag followed by value.
func hasPair(args []string, flag, value string) bool {
	for i := range len(args) - 1 {
		if args[i] == flag && args[i+1] == value {
			return true
		}
	}
	return false
}

func TestComposeTranslation(t *testing.T) {
	svc, secrets := parseCompose(t, readDeploy(t, "docker-compose.yml"), "proofkit-agent")
	args := strings.Join(dockerRun(t, svc, secrets, "p", "/srv/p", "img", "", map[string]string{"PROOFKIT_AGENT_LISTEN": "127.0.0.1:1"}), " ")
	for _, want := range []string{
		"--network host", "--cap-add NET_ADMIN", "--security-opt no-new-privileges:true", "--read-only",
		"--stop-signal SIGTERM", "--stop-timeout 20", "--memory 64m",
		"-e PROOFKIT_AGENT_LISTEN=127.0.0.1:1",
		"-v /proc:/host/proc:ro", "-v /sys:/host/sys:ro", "-v /srv/p/config:/config",
		"-v p_agent-state:/var/lib/proofkit-agent", "-v /srv/p/token:/run/secrets/proofkit_token:ro",
		" img -report-url=https://platform.example/api/v1/readings -token-file=/run/secrets/proofkit_token",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("docker run %s\nlacks %q", args, want)
		}
	}
}
