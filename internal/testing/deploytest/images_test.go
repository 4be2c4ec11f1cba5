package deploytest

import (
	"archive/tar"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/internal/testing/dockerlab"
	"github.com/proofkit/nodekit/internal/testing/testkit"
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
	} {
		stage := dockerlab.FinalStage(t, img.dockerfile, Read(t, img.dockerfile))
		entry := Entrypoint(t, img.dockerfile, Read(t, img.dockerfile))
		for _, arch := range []string{"amd64", "arm64"} {
			t.Run(img.name+"/"+arch, func(t *testing.T) {
				b := &testkit.Build{Pkgs: []string{img.pkg}, Flags: []string{"-trimpath"},
					Env: []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch}}
				t.Cleanup(b.Clean)
				ctxDir := b.Dir(t)
				df := fmt.Sprintf("FROM scratch\nCOPY %s %s\n%s\n", img.name, entry[0], strings.Join(stage, "\n"))
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
// user).
func TestOfflineImages(t *testing.T) {
	d := dockerlab.Start(t, "go")
	out := t.TempDir()
	const version = "v0.0.1-offline"
	cmd := exec.Command("go", "run", "./internal/tools/release", "-out", out, "-arch", runtime.GOARCH,
		"-version", version, "-bin", "proofkit-agent,pinproxy")
	cmd.Dir = filepath.Dir(filepath.Dir(Dir(t)))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./internal/tools/release: %v\n%s", err, b)
	}
	for _, img := range []struct{ name, registry string }{
		{"proofkit-agent", "Dockerfile"},
		{"pinproxy", "pinproxy.Dockerfile"},
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
		})
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
