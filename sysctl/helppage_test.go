//go:build linux

package sysctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The operators' help: "the agent leaves them as a file,
// config/99-proofkit-sysctl.conf beside its compose file". With Dir left
// empty, Apply and WriteFile put it in config/ under the working
// directory (where the compose file is), and the report says what to do
// with it.
func TestSeedFileInConfigBesideCompose(t *testing.T) {
	root := copyTree(t, "defaults")
	// Mode 0444 is how the kernel shows a key this process may not set.
	if err := os.Chmod(filepath.Join(root, "net/core/somaxconn"), 0o444); err != nil {
		t.Fatal(err)
	}
	compose := t.TempDir()
	t.Chdir(compose)

	rep, err := Apply(Config{ProcRoot: procOf(root), MemBytes: testMem, CPUs: testCPUs})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join("config", "99-proofkit-sysctl.conf")
	if rep.File != want {
		t.Errorf("Apply wrote %q, want %q", rep.File, want)
	}
	b, err := os.ReadFile(filepath.Join(compose, want))
	if err != nil {
		t.Fatalf("no file beside the compose file: %v", err)
	}
	if !strings.Contains(string(b), "\nnet.core.somaxconn = ") {
		t.Errorf("the file does not set somaxconn:\n%s", b)
	}
	if s := rep.String(); !strings.Contains(s, "wrote "+want+": copy it to /etc/sysctl.d/, run sudo sysctl --system, restart the agent") {
		t.Errorf("the report does not tell the operator what to do with the file:\n%s", s)
	}

	if err := os.RemoveAll(filepath.Join(compose, "config")); err != nil {
		t.Fatal(err)
	}
	path, err := WriteFile("", rep.Keys)
	if err != nil || path != want {
		t.Errorf("WriteFile(\"\", …) = %q, %v; want %q", path, err, want)
	}
}
