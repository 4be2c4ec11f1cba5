package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/internal/testing/deploytest"
	"github.com/proofkit/nodekit/internal/testing/dockerlab"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// TestIntegrationContainer builds a FROM scratch image of a static
// pinproxy binary with the shipped pinproxy.Dockerfile's final stage (its
// ENTRYPOINT and flags, STOPSIGNAL, and the distroless image's nonroot
// user), runs it with the upstreams file bind-mounted as the Dockerfile's
// comment says, and checks what an operator relies on: bytes go through
// to an upstream on the host's loopback, /healthz and /readyz answer,
// docker kill -s HUP re-reads the upstreams file, and docker stop drains
// and exits 0. The daemon a test starts has no bridge, so the container
// runs with --network host, and -listen and -admin are moved to free
// loopback ports (the command's flags come after the ENTRYPOINT's, and
// the later wins).
func TestIntegrationContainer(t *testing.T) {
	d := dockerlab.Start(t)
	stage := dockerlab.FinalStage(t, "pinproxy.Dockerfile", deploytest.Read(t, "pinproxy.Dockerfile"))
	entry := deploytest.Entrypoint(t, "pinproxy.Dockerfile", strings.Join(stage, "\n"))
	if entry[0] != "/usr/local/bin/pinproxy" || !slices.Contains(entry, "/etc/pinproxy/upstreams") {
		t.Fatalf("pinproxy.Dockerfile ENTRYPOINT %q: want /usr/local/bin/pinproxy reading /etc/pinproxy/upstreams", entry)
	}
	// gcr.io/distroless/static-debian12:nonroot runs as uid 65532.
	stage = append(stage, "USER 65532:65532")
	image := d.BuildScratch(t, ".", "pinproxy", "/usr/local/bin/pinproxy",
		map[string]string{"/etc/pinproxy/upstreams": deploytest.Path(t, "pinproxy-upstreams")}, stage)

	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	// Written in place (not renamed over), so the bind mount sees each
	// new content.
	upstreams := filepath.Join(t.TempDir(), "upstreams")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(upstreams, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("# the test's node\n" + a.Addr + "\n")

	listen, admin := testkit.FreeAddr(t), testkit.FreeAddr(t)
	name := fmt.Sprintf("nk-pinproxy-%d", os.Getpid())
	t.Cleanup(func() { d.Try("rm", "-f", name) })
	d.Run("run", "-d", "--name", name, "--network", "host",
		"-v", upstreams+":/etc/pinproxy/upstreams:ro", image,
		"-listen", listen, "-admin", admin)
	logs := func() string { out, _ := d.Try("logs", name); return out }
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the container's log:\n%s", logs())
		}
	})
	testkit.WaitFor(t, "the proxy's start-up line in the container's log", func() bool {
		if st, _ := d.Try("inspect", "-f", "{{.State.Status}}", name); strings.TrimSpace(st) == "exited" {
			t.Fatalf("the container exited:\n%s", logs())
		}
		return strings.Contains(logs(), `"msg":"admin listening"`)
	})
	if user := strings.TrimSpace(d.Run("inspect", "-f", "{{.Config.User}}", name)); user != "65532:65532" {
		t.Errorf("the container runs as %q, want the nonroot 65532:65532", user)
	}

	// A few bytes each way through the container to A on the host's
	// loopback.
	old, on := pinproxytest.Dial(t, listen, "old")
	if on != "A" {
		t.Fatalf("the first client landed on %s, want A", on)
	}
	if got := get(t, "http://"+admin+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
	if got := get(t, "http://"+admin+"/readyz"); got != "ok\n" {
		t.Errorf("/readyz = %q", got)
	}

	// SIGHUP through docker re-reads the file: the next client goes to B,
	// the live one stays on A.
	write(b.Addr + "\n")
	d.Run("kill", "-s", "HUP", name)
	testkit.WaitFor(t, `"upstreams set" in the container's log after SIGHUP`, func() bool {
		return strings.Count(logs(), `"msg":"upstreams set"`) >= 1
	})
	if _, on := pinproxytest.Dial(t, listen, "new"); on != "B" {
		t.Errorf("a client after docker kill -s HUP landed on %s, want B", on)
	}
	if on, err := old.Ping(); err != nil || on != "A" {
		t.Errorf("the live client after the reload: %q, %v; want still on A", on, err)
	}
	var status struct{ Upstreams []struct{ Addr string } }
	if err := json.Unmarshal([]byte(get(t, "http://"+admin+"/status")), &status); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(status.Upstreams, func(u struct{ Addr string }) bool { return u.Addr == b.Addr }) {
		t.Errorf("/status after the reload: %+v, want B (%s) listed", status.Upstreams, b.Addr)
	}

	// docker stop sends the image's STOPSIGNAL (SIGTERM): the proxy
	// drains, closes the live client within -shutdown-timeout, exits 0.
	old.Conn.Close()
	d.Run("stop", "-t", "45", name)
	if code := strings.TrimSpace(d.Run("inspect", "-f", "{{.State.ExitCode}}", name)); code != "0" {
		t.Errorf("exit code after docker stop: %s, want 0", code)
	}
	if !strings.Contains(logs(), "signal received; draining") {
		t.Error("no drain line in the log after docker stop")
	}
}
