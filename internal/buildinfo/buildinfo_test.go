package buildinfo_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/internal/buildinfo"
	"github.com/proofkit/nodekit/internal/testing/testkit"
)

func TestReadDefaults(t *testing.T) {
	in := buildinfo.Read()
	if in.Version == "" || in.Commit == "" || in.GoVersion != runtime.Version() {
		t.Fatalf("Read() = %+v", in)
	}
	if ua := in.UserAgent("proofkit-agent"); !strings.HasPrefix(ua, "proofkit-agent/") {
		t.Errorf("UserAgent = %q", ua)
	}
}

// TestLdflags builds a program with -ldflags -X and checks it reports the
// version and commit it was given, as a release build would.
func TestLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds a binary")
	}
	dir := t.TempDir()
	main := filepath.Join(dir, "main.go")
	src := `package main

import (
	"fmt"

	"github.com/proofkit/nodekit/internal/buildinfo"
)

func main() { fmt.Println(buildinfo.Read().String()) }
`
	if err := os.WriteFile(main, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// The program must live inside the module to import an internal
	// package: build it from a directory under this one.
	pkg, err := os.MkdirTemp(".", "ldflags-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(pkg)
	if err := os.Rename(main, filepath.Join(pkg, "main.go")); err != nil {
		t.Fatal(err)
	}
	const p = "github.com/proofkit/nodekit/internal/buildinfo"
	b := &testkit.Build{Pkgs: []string{"./" + pkg},
		// -buildvcs=false: the -X values are under test, not the work
		// tree's state, which other packages' tests running beside this
		// one may leave untracked files in (vcs.modified).
		Flags: []string{"-buildvcs=false", "-ldflags", "-X " + p + ".version=v0.5.0 -X " + p + ".commit=0123456789abcdef0123"}}
	t.Cleanup(b.Clean)
	bin := b.Bin(t, filepath.Base(pkg))
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "v0.5.0 (commit 0123456789ab, " + runtime.Version() + ")"
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("built with -X, prints %q, want %q", got, want)
	}
}
