package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/dockerlab"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/sysctl"
)

// The container test runs the agent the way the help page's Docker story
// has it: the image's ENTRYPOINT and HEALTHCHECK, the compose file's
// service, /proc/sys read-only as Docker gives it, and
// config/99-proofkit-sysctl.conf beside the compose file.

// service is one service of a compose file, as far as the shipped file
// uses compose's keys.
type service struct {
	scalars map[string]string   // image, restart, network_mode, read_only, …
	lists   map[string][]string // cap_add, security_opt, command, volumes, secrets
	env     map[string]string   // environment
}

// parseCompose reads the subset of YAML the shipped compose file is
// written in (block maps and lists, flow lists, comments) and returns its
// service name's keys and the file path of each top-level secret.
func parseCompose(t *testing.T, text, name string) (service, map[string]string) {
	t.Helper()
	svc := service{scalars: map[string]string{}, lists: map[string][]string{}, env: map[string]string{}}
	secrets := map[string]string{}
	var top, svcName, key, secret string
	uncomment := regexp.MustCompile(`(^|\s)#.*$`)
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimRight(uncomment.ReplaceAllString(raw, ""), " ")
		if strings.TrimSpace(line) == "" {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		item := strings.TrimSpace(line)
		k, v, isMap := strings.Cut(item, ":")
		v = strings.TrimSpace(v)
		switch {
		case indent == 0:
			top = k
		case top == "services" && indent == 2:
			svcName = k
		case top == "services" && svcName == name && indent == 4:
			key = k
			switch {
			case strings.HasPrefix(v, "["):
				for f := range strings.SplitSeq(strings.Trim(v, "[]"), ",") {
					svc.lists[key] = append(svc.lists[key], unquote(strings.TrimSpace(f)))
				}
			case v != "":
				svc.scalars[key] = unquote(v)
			}
		case top == "services" && svcName == name && indent >= 6:
			switch {
			case key == "build":
			case strings.HasPrefix(item, "- "):
				svc.lists[key] = append(svc.lists[key], unquote(strings.TrimPrefix(item, "- ")))
			case key == "environment" && isMap:
				svc.env[k] = unquote(v)
			default:
				t.Fatalf("docker-compose.yml:%d: %q under %s: not understood by the test's reader", i+1, item, key)
			}
		case top == "secrets" && indent == 2:
			secret = k
		case top == "secrets" && indent == 4 && k == "file":
			secrets[secret] = unquote(v)
		}
	}
	if len(svc.scalars) == 0 {
		t.Fatalf("docker-compose.yml: no service %s", name)
	}
	return svc, secrets
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// dockerRun translates the service into the docker run arguments docker
// compose would use: project dir for relative paths, named volumes
// prefixed by the project, file secrets bind-mounted at /run/secrets.
// network replaces network_mode when not empty; env is added to the
// service's environment.
func dockerRun(t *testing.T, svc service, secrets map[string]string, project, dir, image, network string, env map[string]string) []string {
	t.Helper()
	args := []string{"run", "-d", "--name", project + "-proofkit-agent-1"}
	known := []string{"build", "image", "restart", "network_mode", "cap_add", "security_opt", "read_only",
		"stop_signal", "stop_grace_period", "environment", "command", "volumes", "secrets", "mem_limit"}
	for k := range svc.scalars {
		if !slices.Contains(known, k) {
			t.Fatalf("docker-compose.yml: key %s: the test cannot translate it to docker run", k)
		}
	}
	for k := range svc.lists {
		if !slices.Contains(known, k) {
			t.Fatalf("docker-compose.yml: key %s: the test cannot translate it to docker run", k)
		}
	}
	if network == "" {
		network = svc.scalars["network_mode"]
	}
	if network != "" {
		args = append(args, "--network", network)
	}
	for _, c := range svc.lists["cap_add"] {
		args = append(args, "--cap-add", c)
	}
	for _, s := range svc.lists["security_opt"] {
		args = append(args, "--security-opt", s)
	}
	if svc.scalars["read_only"] == "true" {
		args = append(args, "--read-only")
	}
	if s := svc.scalars["stop_signal"]; s != "" {
		args = append(args, "--stop-signal", s)
	}
	if s := svc.scalars["stop_grace_period"]; s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("stop_grace_period %q: %v", s, err)
		}
		args = append(args, "--stop-timeout", strconv.Itoa(int(d.Seconds())))
	}
	if s := svc.scalars["mem_limit"]; s != "" {
		args = append(args, "--memory", s)
	}
	merged := map[string]string{}
	for k, v := range svc.env {
		merged[k] = v
	}
	for k, v := range env {
		merged[k] = v
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range merged {
			if !yield(k) {
				return
			}
		}
	}) {
		args = append(args, "-e", k+"="+merged[k])
	}
	for _, v := range svc.lists["volumes"] {
		src, rest, _ := strings.Cut(v, ":")
		switch {
		case strings.HasPrefix(src, "./"), strings.HasPrefix(src, "../"):
			src = filepath.Join(dir, src)
		case !strings.HasPrefix(src, "/"):
			src = project + "_" + src // a named volume
		}
		args = append(args, "-v", src+":"+rest)
	}
	for _, s := range svc.lists["secrets"] {
		file, ok := secrets[s]
		if !ok {
			t.Fatalf("docker-compose.yml: secret %s has no file", s)
		}
		args = append(args, "-v", filepath.Join(dir, file)+":/run/secrets/"+s+":ro")
	}
	// The image's HEALTHCHECK as it is, but run every second rather than
	// every 30 s, so the test sees Docker call it healthy.
	args = append(args, "--health-interval", "1s", "--health-start-period", "1s")
	args = append(args, image)
	return append(args, svc.lists["command"]...)
}

// imageLines returns the shipped Dockerfile's final stage without its
// FROM and COPY lines: the VOLUME, HEALTHCHECK and ENTRYPOINT a test
// image built FROM scratch must share.
func imageLines(t *testing.T) []string {
	t.Helper()
	stage := dockerlab.FinalStage(t, "Dockerfile", readDeploy(t, "Dockerfile"))
	if !dockerlab.HasInstruction(stage, "HEALTHCHECK") {
		t.Fatalf("Dockerfile: the final stage has no HEALTHCHECK: %q", stage)
	}
	return stage
}

// sysctlFile reads the keys and values of a 99-proofkit-sysctl.conf.
func sysctlFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q is not key = value", path, line)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out
}

func keyPath(proc, key string) string {
	return filepath.Join(proc, "sys", strings.ReplaceAll(key, ".", "/"))
}

// refused returns the keys the agent's log says it could not write.
func refused(log string) []string {
	var keys []string
	re := regexp.MustCompile(`msg=sysctl key=(\S+) .*action="cannot write"`)
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		keys = append(keys, m[1])
	}
	slices.Sort(keys)
	return keys
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestIntegrationContainer builds a FROM scratch image of a static agent
// binary with the shipped Dockerfile's ENTRYPOINT and HEALTHCHECK, runs
// it as the shipped compose file says (through docker compose when the
// plugin is installed, else the same service translated to docker run),
// and follows the help page: the keys the read-only /proc/sys refused are
// in config/99-proofkit-sysctl.conf beside the compose file; applied in a
// network namespace, the keys a namespace holds leave the file at the
// next start; applied on the host (and restored after), the file is
// removed at the next start.
func TestIntegrationContainer(t *testing.T) {
	d := dockerlab.Start(t, "nsenter")
	compose := "" // "docker compose" or "docker-compose" when installed
	if _, err := d.Try("compose", "version"); err == nil {
		compose = "docker compose"
	} else if _, err := exec.LookPath("docker-compose"); err == nil {
		compose = "docker-compose"
	}
	if compose == "" {
		t.Log("neither docker compose nor docker-compose is installed: running the compose file's service through docker run, translated key by key")
	}

	// The image: a static binary, FROM scratch, no registry.
	image := d.BuildScratch(t, ".", "proofkit-agent", "/usr/local/bin/proofkit-agent", nil, imageLines(t))

	// The project: the compose file and a token, as an operator has them.
	project := fmt.Sprintf("nkops%d", os.Getpid())
	dir := t.TempDir()
	// The operator's one edit: the platform's URL for the documentation's
	// placeholder, which the agent refuses.
	composeText := strings.ReplaceAll(readDeploy(t, "docker-compose.yml"), "https://platform.example/", "https://platform.nodekit.test/")
	if err := os.WriteFile(filepath.Join(dir, "docker-compose.yml"), []byte(composeText), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("test-token-not-a-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	svc, secrets := parseCompose(t, composeText, "proofkit-agent")
	if svc.scalars["network_mode"] != "host" || svc.env["PROOFKIT_AGENT_LISTEN"] == "" {
		t.Fatalf("the compose service: network_mode %q, PROOFKIT_AGENT_LISTEN %q", svc.scalars["network_mode"], svc.env["PROOFKIT_AGENT_LISTEN"])
	}
	container := project + "-proofkit-agent-1"
	t.Cleanup(func() {
		d.Try("rm", "-f", container)
		d.Try("rm", "-f", project+"-netns")
		d.Try("volume", "rm", "-f", project+"_agent-state")
	})

	// up starts the service on network (empty: the compose file's) and
	// waits for its start-up line; it returns the container's log so far.
	listen := testkit.FreeAddr(t) // 9464 may be taken on this host
	up := func(network string) string {
		t.Helper()
		d.Try("rm", "-f", container)
		env := map[string]string{"PROOFKIT_AGENT_LISTEN": listen}
		if compose != "" && network == "" {
			override := fmt.Sprintf("services:\n  proofkit-agent:\n    image: %s\n    container_name: %s\n    environment:\n      PROOFKIT_AGENT_LISTEN: %q\n", image, container, listen)
			if err := os.WriteFile(filepath.Join(dir, "docker-compose.override.yml"), []byte(override), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append(strings.Fields(compose), "-p", project, "-f", filepath.Join(dir, "docker-compose.yml"),
				"-f", filepath.Join(dir, "docker-compose.override.yml"), "up", "-d", "--no-build")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := exec.CommandContext(ctx, args[0], args[1:]...)
			c.Env = append(os.Environ(), "DOCKER_HOST="+d.Host)
			if out, err := c.CombinedOutput(); err != nil {
				t.Fatalf("%s up: %v\n%s", compose, err, out)
			}
		} else {
			d.Run(dockerRun(t, svc, secrets, project, dir, image, network, env)...)
		}
		var log string
		testkit.WaitFor(t, "the agent's start-up line in the container's log", func() bool {
			log, _ = d.Try("logs", container)
			if st, _ := d.Try("inspect", "-f", "{{.State.Status}}", container); strings.TrimSpace(st) == "exited" {
				t.Fatalf("the container exited:\n%s", log)
			}
			return strings.Contains(log, `msg="agent started"`)
		})
		return log
	}

	// 1. Docker's read-only /proc/sys: the refused keys land in the file.
	log := up("")
	// The version is "devel" built in a work tree without VCS stamping,
	// a pseudo-version (v0.0.0-DATE-COMMIT) in a git checkout.
	if !regexp.MustCompile(`msg="agent started" version=(devel|v[0-9]\S+) `).MatchString(log) {
		t.Errorf("the start-up line has no version:\n%s", log)
	}
	conf := filepath.Join(dir, "config", sysctl.FileName)
	refusedKeys := refused(log)
	if len(refusedKeys) == 0 {
		if _, err := os.Stat(conf); err == nil {
			t.Fatalf("%s written though the log refuses no key:\n%s", conf, log)
		}
		t.Skip("skipping the rest: the host already holds every sysctl target, so the agent had nothing to refuse")
	}
	file := sysctlFile(t, conf)
	// The operator's copy, as in /etc/sysctl.d.
	saved, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedKeys(file); !slices.Equal(got, refusedKeys) {
		t.Errorf("%s holds %v; the agent logged %v as refused", conf, got, refusedKeys)
	}
	if !strings.Contains(log, "EROFS") && !strings.Contains(log, "read-only") {
		t.Errorf("the log does not say /proc/sys was read-only:\n%s", log)
	}
	// The image's HEALTHCHECK is the agent's own -healthcheck, and it
	// passes in the running container.
	if hc := d.Run("inspect", "-f", "{{json .Config.Healthcheck.Test}}", container); !strings.Contains(hc, `"/usr/local/bin/proofkit-agent","-healthcheck"`) {
		t.Errorf("image HEALTHCHECK %s", hc)
	}
	testkit.WaitFor(t, "the healthcheck to pass in the container", func() bool {
		_, err := d.Try("exec", container, "/usr/local/bin/proofkit-agent", "-healthcheck")
		return err == nil
	})
	if compose == "" {
		testkit.WaitFor(t, "Docker to call the container healthy", func() bool {
			st, _ := d.Try("inspect", "-f", "{{.State.Health.Status}}", container)
			return strings.TrimSpace(st) == "healthy"
		})
	}
	if out, err := d.Try("exec", container, "/usr/local/bin/proofkit-agent", "-version"); err != nil || !strings.HasPrefix(out, "proofkit-agent ") {
		t.Errorf("-version in the container: %v %q", err, out)
	}
	t.Logf("read-only /proc/sys refused %d keys: %v", len(refusedKeys), refusedKeys)

	// 2. A network namespace (a container's, held by a second container):
	// apply the file there; the keys a namespace holds take, the host's
	// do not. The agent restarted in it leaves only those in the file.
	d.Run("run", "-d", "--name", project+"-netns", "--network", "none", "--tmpfs", "/tmp",
		"--entrypoint", "/usr/local/bin/proofkit-agent", image, "-sysctl", "off", "-listen", "off", "-state-dir", "/tmp/state")
	pid := strings.TrimSpace(d.Run("inspect", "-f", "{{.State.Pid}}", project+"-netns"))
	// Debian's sysctl -w exits 0 even where the kernel refuses a key, so
	// each write is a shell redirection, checked by reading it back.
	var took, hostOnly []string
	for _, k := range sortedKeys(file) {
		nsenter := func(script string, args ...string) (string, error) {
			out, err := exec.Command("nsenter", append([]string{"--net=/proc/" + pid + "/ns/net", "--", "sh", "-c", script, "sh"}, args...)...).CombinedOutput()
			return strings.TrimSpace(string(out)), err
		}
		path := keyPath("/proc", k)
		out, err := nsenter(`printf '%s\n' "$1" > "$2"`, file[k], path)
		if err == nil {
			var got string
			got, err = nsenter(`cat "$1"`, path)
			if err == nil && strings.Join(strings.Fields(got), " ") != file[k] {
				err = fmt.Errorf("reads back %q", got)
			}
		}
		if err != nil {
			hostOnly = append(hostOnly, k)
			t.Logf("in the namespace, %s: %v %s", k, err, out)
			continue
		}
		took = append(took, k)
	}
	t.Logf("applied in the namespace: %v; host-only there: %v", took, hostOnly)
	log = up("container:" + project + "-netns")
	if len(hostOnly) == 0 {
		if _, err := os.Stat(conf); err == nil {
			t.Errorf("%s still there after every key was applied in the namespace", conf)
		}
	} else {
		left := sortedKeys(sysctlFile(t, conf))
		if !slices.Equal(left, hostOnly) {
			t.Errorf("after applying in the namespace, %s holds %v; want the keys the namespace could not take, %v\n%s", conf, left, hostOnly, log)
		}
	}

	// 3. The host: apply the operator's copy of the first file as sysctl
	// --system does (a write of each key's file under /proc/sys), restart,
	// and the file is gone. The host's values are restored after.
	// Unlocked after the restores below (cleanups run last first).
	t.Cleanup(testkit.LockHostSysctl(t))
	for _, k := range sortedKeys(file) {
		old, err := os.ReadFile(keyPath("/proc", k))
		if err != nil {
			t.Fatalf("host %s: %v", k, err)
		}
		t.Cleanup(func() {
			if err := os.WriteFile(keyPath("/proc", k), old, 0o644); err != nil {
				t.Errorf("restoring host %s to %q: %v", k, strings.TrimSpace(string(old)), err)
			}
		})
	}
	applied := sysctlFile(t, writeTemp(t, saved))
	for _, k := range sortedKeys(applied) {
		if err := os.WriteFile(keyPath("/proc", k), []byte(applied[k]+"\n"), 0o644); err != nil {
			t.Fatalf("host %s = %s: %v", k, applied[k], err)
		}
	}
	log = up("")
	if _, err := os.Stat(conf); err == nil {
		t.Errorf("%s still there after applying it on the host and a restart:\n%s", conf, log)
	}
	if keys := refused(log); len(keys) != 0 {
		t.Errorf("after applying the file on the host the agent still refuses %v", keys)
	}
	if code := d.Run("stop", container); code == "" {
		t.Error("docker stop printed nothing")
	}
	if st := strings.TrimSpace(d.Run("inspect", "-f", "{{.State.ExitCode}}", container)); st != "0" {
		t.Errorf("exit code after docker stop (SIGTERM): %s, want 0", st)
	}
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), sysctl.FileName)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
