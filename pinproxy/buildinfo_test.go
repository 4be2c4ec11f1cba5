package pinproxy

import (
	"runtime/debug"
	"testing"
)

// builtWithRace says what the test binary's build info records of
// -race; it skips t when the binary has no build info.
func builtWithRace(t *testing.T) bool {
	t.Helper()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build info in this test binary")
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// TestBuildInfoRecordsSettings: the build info builtWithRace reads holds
// the build's settings, so a missing -race means a build without it,
// not a build info without settings.
func TestBuildInfoRecordsSettings(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build info in this test binary")
	}
	for _, s := range bi.Settings {
		if s.Key == "GOARCH" {
			return
		}
	}
	t.Errorf("build info has no GOARCH setting: %v", bi.Settings)
}
