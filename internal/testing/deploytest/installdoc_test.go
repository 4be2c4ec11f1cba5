package deploytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallOfflineSteps runs docs/install.md's offline image block as
// written, one line after another in one shell, from a directory holding
// the three tarballs, with docker standing in as a script: each docker
// build must get the tarball's own directory, whose Dockerfile runs the
// binary the tag names. (A cd into the first tarball's directory once
// left the next tar to fail and tagged the proxy's image as the agent's.)
func TestInstallOfflineSteps(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("skipping: needs tar")
	}
	doc, err := os.ReadFile(filepath.Join(Dir(t), "..", "..", "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n## Container images on a host with no registry\n")
	if !ok {
		t.Fatal("docs/install.md: no section ## Container images on a host with no registry")
	}
	_, block, ok := strings.Cut(sec, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || !strings.Contains(block, "docker build") {
		t.Fatalf("docs/install.md: the offline section has no sh block of docker builds:\n%s", sec)
	}

	dir := t.TempDir()
	const version = "v0.5.0"
	bins := []string{"pinproxy", "proofkit-agent", "proofkit-platform"}
	for _, bin := range bins {
		name := fmt.Sprintf("%s-%s-linux-amd64", bin, version)
		src := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		df := fmt.Sprintf("FROM scratch\nENTRYPOINT [\"/usr/local/bin/%s\"]\n", bin)
		if err := os.WriteFile(filepath.Join(src, "Dockerfile"), []byte(df), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("tar", "czf", filepath.Join(dir, name+".tar.gz"), "-C", filepath.Dir(src), name).CombinedOutput(); err != nil {
			t.Fatalf("tar: %v\n%s", err, out)
		}
	}
	bin := t.TempDir()
	builds := filepath.Join(t.TempDir(), "builds")
	// docker build -t TAG CONTEXT: the context's Dockerfile must run TAG.
	stub := `#!/bin/sh
[ "$1" = build ] && [ "$2" = -t ] || { echo "docker $*: want docker build -t TAG CONTEXT" >&2; exit 1; }
grep -q "\"/usr/local/bin/$3\"" "$4/Dockerfile" || { echo "docker build -t $3 $4: that directory's image is not $3's" >&2; exit 1; }
echo "$3" >> "` + builds + `"
`
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("# no certificates\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(block, "/etc/ssl/certs/ca-certificates.crt", ca)
	cmd := exec.Command("sh", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docs/install.md's offline block, run as written: %v\n%s\nthe block:\n%s", err, out, block)
	}
	got, _ := os.ReadFile(builds)
	if want := strings.Join(bins, "\n") + "\n"; string(got) != want {
		t.Errorf("images built: %q, want %q", got, want)
	}
}
