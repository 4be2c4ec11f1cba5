package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The API of testdata/tiny/lib, as apicheck records it.
var tinyAPI = []string{
	"pkg lib, const Answer = 42",
	"pkg lib, const KindA Kind = 1",
	"pkg lib, const Share = 0.05 // 1/20",
	"pkg lib, const Wait time.Duration = 3000000000",
	"pkg lib, func Greet(string, ...int) (string, error)",
	"pkg lib, func Max[T int | float64](T, T) T",
	"pkg lib, method (*Thing) Set(int)",
	"pkg lib, method (Base) Name() string",
	"pkg lib, method (Thing) Name() string",
	"pkg lib, method (Thing) Note() string",
	"pkg lib, type Alias = Thing",
	"pkg lib, type Base struct",
	"pkg lib, type Base struct, ID string",
	"pkg lib, type Kind uint8",
	"pkg lib, type Reader interface { Kind, Read }",
	"pkg lib, type Reader interface, Kind() Kind",
	"pkg lib, type Reader interface, Read([]byte) (int, error)",
	"pkg lib, type Thing struct",
	"pkg lib, type Thing struct, At time.Time",
	"pkg lib, type Thing struct, Count int",
	"pkg lib, type Thing struct, embedded Base",
	"pkg lib, var ErrNone error",
}

// tiny copies testdata/tiny to a directory of its own, so the test may
// change it.
func tiny(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command in PATH:", err)
	}
	dir := t.TempDir()
	err := filepath.WalkDir("testdata/tiny", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("testdata/tiny", path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func runTool(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errs bytes.Buffer
	code := run(args, &out, &errs)
	if errs.Len() > 0 {
		t.Logf("stderr: %s", errs.String())
	}
	return code, out.String()
}

// -write records the API; a check of the same source then passes; an
// added and a removed name each fail it, listed with + and -, and so does
// a package whose file is missing.
func TestRecordAndCheck(t *testing.T) {
	dir := tiny(t)
	if code, out := runTool(t, "-C", dir, "lib"); code != 1 || !strings.Contains(out, "api/lib.txt: no such file") {
		t.Errorf("check without a file: exit %d, %q; want 1 naming the missing file", code, out)
	}
	if code, out := runTool(t, "-C", dir, "-write", "lib"); code != 0 {
		t.Fatalf("-write: exit %d: %s", code, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "api", "lib.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSpace(string(b)), "\n"); !slices.Equal(got, tinyAPI) {
		t.Errorf("api/lib.txt:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tinyAPI, "\n"))
	}
	if code, out := runTool(t, "-C", dir, "lib"); code != 0 || out != "" {
		t.Errorf("check of the recorded API: exit %d, %q; want 0 and nothing", code, out)
	}

	src := filepath.Join(dir, "lib", "lib.go")
	b, err = os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(b), "func (t Thing) Note() string { return t.note }",
		"func (t *Thing) Note(n int) string { return t.note }", 1) + "\nfunc Added(int) string { return \"\" }\n"
	if err := os.WriteFile(src, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runTool(t, "-C", dir, "lib")
	for _, want := range []string{
		"api/lib.txt: the API of lib differs from the file:\n",
		"\n-pkg lib, method (Thing) Note() string\n",
		"\n+pkg lib, func Added(int) string\n",
		"\n+pkg lib, method (*Thing) Note(int) string\n",
		"go run ./internal/tools/apicheck -write",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check after a change: output lacks %q:\n%s", want, out)
		}
	}
	if code != 1 {
		t.Errorf("check after a change: exit %d, want 1", code)
	}
}

// A package that does not build is an error, not an empty API.
func TestBrokenPackage(t *testing.T) {
	dir := tiny(t)
	if err := os.WriteFile(filepath.Join(dir, "lib", "bad.go"), []byte("package lib\n\nfunc Bad() int { return \"\" }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := run([]string{"-C", dir, "-write", "lib"}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "bad.go") {
		t.Errorf("-write of a package that does not build: exit %d, stderr %q; want 1 naming bad.go", code, errs.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "api", "lib.txt")); err == nil {
		t.Errorf("api/lib.txt written for a package that does not build")
	}
}
