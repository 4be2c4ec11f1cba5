package atomicfile_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/internal/atomicfile"
)

func TestWriteFileReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, s := range []string{"one", "two, longer"} {
		if err := atomicfile.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != s {
			t.Fatalf("read %q, %v; want %q", b, err, s)
		}
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file", len(entries))
	}
}

func TestWriteFileErrorNamesPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "no", "such", "dir", "f")
	err := atomicfile.WriteFile(p, []byte("x"), 0o600)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("error %v does not name %s", err, p)
	}
}

// TestKilledMidWrite kills a child process, with SIGKILL, while it
// rewrites a file in a loop: the file then holds one whole version, never
// a part, and RemoveTemps clears what the kill left.
func TestKilledMidWrite(t *testing.T) {
	if os.Getenv("ATOMICFILE_CHILD") != "" {
		p := os.Getenv("ATOMICFILE_CHILD")
		big := strings.Repeat("b", 1<<20)
		for i := 0; ; i++ {
			s := "a"
			if i%2 == 1 {
				s = big
			}
			if err := atomicfile.WriteFile(p, []byte(s), 0o600); err != nil {
				os.Exit(3)
			}
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := atomicfile.WriteFile(p, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 5; round++ {
		cmd := exec.Command(exe, "-test.run=^TestKilledMidWrite$")
		cmd.Env = append(os.Environ(), "ATOMICFILE_CHILD="+p)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Let it write a while, then kill it wherever it is.
		for i := 0; i < 3; i++ {
			if _, err := os.ReadFile(p); err != nil {
				t.Fatal(err)
			}
		}
		_ = exec.Command("sleep", "0.2").Run()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); s != "a" && s != strings.Repeat("b", 1<<20) {
			t.Fatalf("round %d: file holds %d bytes of a torn write", round, len(b))
		}
		if err := atomicfile.RemoveTemps(p); err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Fatalf("round %d: %d entries left after RemoveTemps", round, len(entries))
		}
	}
}
