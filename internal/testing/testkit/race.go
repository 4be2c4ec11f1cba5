package testkit

import (
	"runtime/debug"
	"testing"
)

// BuiltWithRace says whether the test binary was built with -race, as its
// build info records; it skips t when the binary has no build info.
// Allocation counts, for one, are not checked under the race detector,
// which allocates beside the code it checks.
func BuiltWithRace(t testing.TB) bool {
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
