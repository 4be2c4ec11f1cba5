package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Build is a set of commands a package's tests build once and share: the
// first call of Dir or Run builds them all with one go build into a new
// temporary directory, each binary named after its package's last path
// element, and later calls return that directory or that error. The
// package's TestMain (or, for a Build local to one test, t.Cleanup)
// calls Clean to remove the directory.
type Build struct {
	// Pkgs are the main packages to build: import paths, or paths
	// relative to the test's package directory.
	Pkgs []string
	// Flags are extra go build flags, such as "-tags", "x" or "-trimpath".
	Flags []string
	// Env is added to the environment of go build, such as
	// "CGO_ENABLED=0" or "GOARCH=arm64".
	Env []string

	once sync.Once
	dir  string
	err  error
}

// Run builds b's packages the first time it is called and returns the
// directory holding the binaries. It is for TestMain, which has no t.
func (b *Build) Run() (string, error) {
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "nk-bin-"); b.err != nil {
			return
		}
		args := append([]string{"build"}, b.Flags...)
		args = append(args, "-o", b.dir+string(filepath.Separator))
		cmd := exec.Command("go", append(args, b.Pkgs...)...)
		cmd.Env = append(os.Environ(), b.Env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", strings.Join(slices.Concat(b.Flags, b.Pkgs), " "), err, out)
		}
	})
	return b.dir, b.err
}

// Dir is Run for a test: it fails t, naming the packages, if the build
// failed.
func (b *Build) Dir(t testing.TB) string {
	t.Helper()
	dir, err := b.Run()
	if err != nil {
		t.Fatalf("building %v: %v", b.Pkgs, err)
	}
	return dir
}

// Bin returns the path of the binary named name (a package's last path
// element) in Dir.
func (b *Build) Bin(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(b.Dir(t), name)
}

// Clean removes the directory Run built into, if any.
func (b *Build) Clean() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}
