package deploytest

import (
	"fmt"
	"os"
	"path/filepath"
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
