package pinproxy

import (
	"runtime/debug"
	"testing"
)

// checkRaceEnabled fails t unless enabled says what the build info
// records of -race.
func checkRaceEnabled(t *testing.T, enabled bool) {
	t.Helper()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build info in this test binary")
	}
	built := false
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			built = s.Value == "true"
		}
	}
	if built != enabled {
		t.Errorf("raceEnabled = %v, but the binary was built with -race=%v", enabled, built)
	}
}
