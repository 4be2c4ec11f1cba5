package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// ArtifactDir is where a test leaves files for people to look at:
// $TEST_ARTIFACTS/<test> when set (CI keeps it), else go test's own
// artifact directory (kept with -artifacts).
func ArtifactDir(t *testing.T) string {
	t.Helper()
	if root := os.Getenv("TEST_ARTIFACTS"); root != "" {
		dir := filepath.Join(root, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.ArtifactDir()
}
