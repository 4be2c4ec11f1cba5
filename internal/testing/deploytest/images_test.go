package deploytest

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/dockerlab"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// TestImagesBothArchitectures builds each Dockerfile's image FROM scratch
// for linux/amd64 and linux/arm64 (the binary cross-compiled, the final
// stage's lines as they are) and checks the architecture each image
// records. The container tests run the host's image; this one shows the
// Dockerfiles' final stages hold nothing tied to one architecture.
func TestImagesBothArchitectures(t *testing.T) {
	d := dockerlab.Start(t)
	for _, img := range []struct{ dockerfile, pkg, name string }{
		{"Dockerfile", "github.com/proofkit/nodekit/cmd/proofkit-agent", "proofkit-agent"},
		{"pinproxy.Dockerfile", "github.com/proofkit/nodekit/cmd/pinproxy", "pinproxy"},
		{"proofkit-platform.Dockerfile", "github.com/proofkit/nodekit/examples/platform", "proofkit-platform"},
	} {
		stage := dockerlab.FinalStage(t, img.dockerfile, Read(t, img.dockerfile))
		entry := Entrypoint(t, img.dockerfile, Read(t, img.dockerfile))
		for _, arch := range []string{"amd64", "arm64"} {
			t.Run(img.name+"/"+arch, func(t *testing.T) {
				b := &testkit.Build{Pkgs: []string{img.pkg}, Flags: []string{"-trimpath"},
					Env: []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch}}
				t.Cleanup(b.Clean)
				ctxDir := b.Dir(t)
				// The binary is named after its package (examples/platform's: platform).
				df := fmt.Sprintf("FROM scratch\nCOPY %s %s\n%s\n", path.Base(img.pkg), entry[0], strings.Join(stage, "\n"))
				if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(df), 0o644); err != nil {
					t.Fatal(err)
				}
				tag := fmt.Sprintf("nk-%s-%s:%d", img.name, arch, os.Getpid())
				d.Run("build", "-q", "--platform", "linux/"+arch, "-t", tag, ctxDir)
				t.Cleanup(func() { d.Try("rmi", "-f", tag) })
				if got := strings.TrimSpace(d.Run("image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", tag)); got != "linux/"+arch {
					t.Errorf("%s built for linux/%s records %s", img.dockerfile, arch, got)
				}
			})
		}
	}
}

// TestOfflineImages builds each image as a host with no registry does:
// FROM scratch, from the release tarball, its directory the build
// context and its Dockerfile examples/deploy/offline's. The image's
// binary prints the release's version, and the image runs as the
// registry-built one does (the same final stage but for the base's
// user). The platform's image also serves, as its Dockerfile's comment
// runs it (servesAPI).
func TestOfflineImages(t *testing.T) {
	d := dockerlab.Start(t, "go")
	out := t.TempDir()
	const version = "v0.0.1-offline"
	cmd := exec.Command("go", "run", "./internal/tools/release", "-out", out, "-arch", runtime.GOARCH,
		"-version", version, "-bin", "proofkit-agent,pinproxy,proofkit-platform")
	cmd.Dir = filepath.Dir(filepath.Dir(Dir(t)))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./internal/tools/release: %v\n%s", err, b)
	}
	for _, img := range []struct{ name, registry string }{
		{"proofkit-agent", "Dockerfile"},
		{"pinproxy", "pinproxy.Dockerfile"},
		{"proofkit-platform", "proofkit-platform.Dockerfile"},
	} {
		t.Run(img.name, func(t *testing.T) {
			offline := dockerlab.FinalStage(t, "offline/"+img.name+".Dockerfile", Read(t, "offline/"+img.name+".Dockerfile"))
			registry := dockerlab.FinalStage(t, img.registry, Read(t, img.registry))
			withoutUser := func(stage []string) []string {
				return slices.DeleteFunc(slices.Clone(stage), func(l string) bool { return strings.HasPrefix(l, "USER ") })
			}
			if !slices.Equal(withoutUser(offline), withoutUser(registry)) {
				t.Errorf("offline/%s.Dockerfile's stage differs from %s's:\n%q\n%q", img.name, img.registry, offline, registry)
			}
			ctxDir := untar(t, filepath.Join(out, img.name+"-"+version+"-linux-"+runtime.GOARCH+".tar.gz"))
			if img.name == "proofkit-agent" {
				// The operator copies the host's CAs in; any PEM file does here.
				ca := []byte("# no certificates\n")
				if b, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
					ca = b
				}
				if err := os.WriteFile(filepath.Join(ctxDir, "ca-certificates.crt"), ca, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tag := fmt.Sprintf("nk-offline-%s:%d", img.name, os.Getpid())
			d.Run("build", "-q", "-t", tag, ctxDir)
			t.Cleanup(func() { d.Try("rmi", "-f", tag) })
			got := d.Run("run", "--rm", "--network", "none", "--entrypoint", "/usr/local/bin/"+img.name, tag, "-version")
			if !strings.Contains(got, " "+version+" (commit ") {
				t.Errorf("%s -version in the image prints %q, want %s", img.name, got, version)
			}
			if img.name == "proofkit-platform" {
				servesAPI(t, d, tag)
			}
		})
	}
}

// servesAPI runs the platform's image as its Dockerfile's comment does,
// the tokens file mounted read-only and the state in the image's volume,
// and checks that it runs as the nonroot user, answers GET /healthz
// without a token and its own -healthcheck in the container, takes the mounted file's admin token and refuses a
// request without one, keeps a reading's node in the volume, and exits 0
// on docker stop. The daemon a test starts has no bridge, so the
// container runs with --network host and -listen moves to a free
// loopback port (the command's flags come after the ENTRYPOINT's, and
// the later wins).
func servesAPI(t *testing.T, d *dockerlab.Daemon, image string) {
	const token = "offline-admin-token"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# the platform's admin\n"+token+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := testkit.FreeAddr(t)
	name := fmt.Sprintf("nk-offline-platform-%d", os.Getpid())
	t.Cleanup(func() { d.Try("rm", "-f", "-v", name) })
	d.Run("run", "-d", "--name", name, "--network", "host",
		"-v", tokens+":/etc/proofkit-platform/tokens:ro", image, "-listen", listen)
	logs := func() string { out, _ := d.Try("logs", name); return out }
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the container's log:\n%s", logs())
		}
	})
	base := "http://" + listen
	client := &http.Client{Timeout: 5 * time.Second}
	call := func(method, path, auth, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode, string(b)
	}
	testkit.WaitFor(t, "GET /healthz from the container", func() bool {
		if st, _ := d.Try("inspect", "-f", "{{.State.Status}}", name); strings.TrimSpace(st) == "exited" {
			t.Fatalf("the container exited:\n%s", logs())
		}
		code, _ := call("GET", "/healthz", "", "")
		return code == http.StatusOK
	})
	// The image's HEALTHCHECK is the platform's own -healthcheck, which
	// answers from inside the container (at the -listen given here).
	if hc := d.Run("inspect", "-f", "{{json .Config.Healthcheck.Test}}", name); !strings.Contains(hc, `"/usr/local/bin/proofkit-platform","-healthcheck"`) {
		t.Errorf("the image's health check is %s, want the platform's -healthcheck", hc)
	}
	if out, err := d.Try("exec", name, "/usr/local/bin/proofkit-platform", "-healthcheck", "-listen", listen); err != nil {
		t.Errorf("-healthcheck in the container: %v %s", err, out)
	}
	if user := strings.TrimSpace(d.Run("inspect", "-f", "{{.Config.User}}", name)); user != "65532:65532" {
		t.Errorf("the container runs as %q, want the nonroot 65532:65532", user)
	}
	if code, body := call("GET", "/nodes", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /nodes without a token: %d %s, want 401", code, body)
	}
	// A node's first reading writes its file in the state volume, which
	// the nonroot user must own.
	reading, err := json.Marshal(overload.Reading{Version: overload.ReadingVersion, Node: "n1", Run: "0123456789abcdef0123456789abcdef", Seq: 1,
		At: time.Now(), MemoryUsedPercent: 40, CPUs: 4, ConntrackMax: 262144})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := call("POST", "/report", token, string(reading)); code != http.StatusOK {
		t.Fatalf("POST /report with the mounted file's admin token: %d %s, want 200", code, body)
	}
	if code, body := call("GET", "/nodes/n1", token, ""); code != http.StatusOK || !strings.Contains(body, `"n1"`) {
		t.Errorf("GET /nodes/n1 after its reading: %d %s, want 200 with the node", code, body)
	}
	d.Run("stop", name)
	if code := strings.TrimSpace(d.Run("inspect", "-f", "{{.State.ExitCode}}", name)); code != "0" {
		t.Errorf("after docker stop the platform exited %s, want 0", code)
	}
	out := t.TempDir()
	d.Run("cp", name+":/var/lib/proofkit-platform/n1.json", out)
	if b, err := os.ReadFile(filepath.Join(out, "n1.json")); err != nil || !strings.Contains(string(b), `"n1"`) {
		t.Errorf("node n1's file in the state volume: %v %.200s", err, b)
	}
}

// untar unpacks a release tarball into a temporary directory and
// returns the directory it holds.
func untar(t *testing.T, tgz string) string {
	t.Helper()
	dir := t.TempDir()
	_, files := Tarball(t, tgz)
	top := ""
	for _, f := range files {
		name := filepath.Join(dir, filepath.FromSlash(f.Name))
		if !strings.HasPrefix(name, dir+string(filepath.Separator)) {
			t.Fatalf("%s: entry %s outside the directory", tgz, f.Name)
		}
		if f.Typeflag == tar.TypeDir {
			if top == "" {
				top = name
			}
			if err := os.MkdirAll(name, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(name, f.Body, os.FileMode(f.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	if top == "" {
		t.Fatalf("%s holds no directory", tgz)
	}
	return top
}
