// Package deploytest reads the deployment files in examples/deploy (the
// systemd units, the Dockerfiles) for the binaries' tests, which keep
// those files' command lines in step with the flags, and builds a binary
// stamped with a release version.
//
//	unit := deploytest.Read(t, "pinproxy.service")
//	args := strings.Fields(deploytest.UnitValue(t, "pinproxy.service", unit, "ExecStart"))
//	entry := deploytest.Entrypoint(t, "pinproxy.Dockerfile", deploytest.Read(t, "pinproxy.Dockerfile"))
package deploytest

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// Dir returns the path of examples/deploy, found from the working
// directory up to the module's root (the directory holding go.mod).
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "examples", "deploy")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Path returns the path of the deployment file name.
func Path(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(Dir(t), name)
}

// Read returns the deployment file name's text.
func Read(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(Path(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// UnitValue returns the value of a systemd unit's first key= line, its
// backslash continuations joined; it fails t, naming the file, when
// there is none.
func UnitValue(t testing.TB, name, unit, key string) string {
	t.Helper()
	joined := strings.ReplaceAll(unit, "\\\n", " ")
	for line := range strings.SplitSeq(joined, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+"="); ok {
			return v
		}
	}
	t.Fatalf("%s: no %s= line", name, key)
	return ""
}

var entrypointRE = regexp.MustCompile(`(?m)^ENTRYPOINT\s+(\[.*\])\s*$`)

// Entrypoint returns a Dockerfile's ENTRYPOINT, a JSON array over
// continuation lines; it fails t, naming the file, when there is none or
// it does not parse.
func Entrypoint(t testing.TB, name, dockerfile string) []string {
	t.Helper()
	m := entrypointRE.FindStringSubmatch(strings.ReplaceAll(dockerfile, "\\\n", " "))
	if m == nil {
		t.Fatalf("%s: no ENTRYPOINT [...] line", name)
	}
	var args []string
	if err := json.Unmarshal([]byte(m[1]), &args); err != nil || len(args) == 0 {
		t.Fatalf("%s ENTRYPOINT %s: %v", name, m[1], err)
	}
	return args
}

// VerifyUnit runs systemd-analyze verify on the unit file name with its
// ExecStart=installed pointed at bin (verify checks that the binary
// exists), and fails t on any complaint. It skips t without
// systemd-analyze.
func VerifyUnit(t testing.TB, name, installed, bin string) {
	t.Helper()
	testkit.NeedTools(t, "systemd-analyze")
	unit := strings.Replace(Read(t, name), "ExecStart="+installed, "ExecStart="+bin, 1)
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
	}
}

// BuildStamped builds the main package in the working directory as name
// in a temporary directory, with internal/buildinfo's version and commit
// set by -ldflags -X as a release build sets them, and returns its path.
func BuildStamped(t testing.TB, name, version, commit string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	const p = "github.com/proofkit/nodekit/internal/buildinfo"
	out, err := exec.Command("go", "build", "-o", bin, "-ldflags", "-X "+p+".version="+version+" -X "+p+".commit="+commit, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// A TarFile is one entry of a tarball.
type TarFile struct {
	*tar.Header
	Body []byte
}

// Tarball reads the gzipped tar tgz (a release tarball) and returns its
// gzip header and its entries in order, failing t on an error.
func Tarball(t testing.TB, tgz string) (gzip.Header, []TarFile) {
	t.Helper()
	f, err := os.Open(tgz)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", tgz, err)
	}
	var files []TarFile
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return zr.Header, files
		}
		if err != nil {
			t.Fatalf("%s: %v", tgz, err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %s: %v", tgz, h.Name, err)
		}
		files = append(files, TarFile{h, body})
	}
}

// Settings returns the KEY=VALUE lines of the /etc/default file name
// (proofkit-agent.default), as systemd's EnvironmentFile= reads them:
// comments and blank lines skipped, values as written.
func Settings(t testing.TB, name string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for i, l := range strings.Split(Read(t, name), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("%s:%d: %q: want KEY=VALUE", name, i+1, l)
		}
		env[k] = v
	}
	return env
}

// UnitEnvironment returns the variables a unit's Environment= lines set
// (KEY=VALUE, one a line, unquoted), later lines winning as in systemd.
func UnitEnvironment(t testing.TB, name, unit string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for line := range strings.SplitSeq(unit, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "Environment=")
		if !ok {
			continue
		}
		k, v, ok := strings.Cut(v, "=")
		if !ok || strings.ContainsAny(v, "\"' ") {
			t.Fatalf("%s: Environment=%s: want one KEY=VALUE, unquoted", name, v)
		}
		env[k] = v
	}
	return env
}
