//go:build race

package pinproxy

import (
	"testing"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// raceEnabled: the race detector allocates on its own, so allocation
// counts are not checked.
const raceEnabled = true

// TestRaceEnabledMatchesBuild: the build tag that chose this file and the
// build's own record of -race agree.
func TestRaceEnabledMatchesBuild(t *testing.T) {
	if built := testkit.BuiltWithRace(t); built != raceEnabled {
		t.Errorf("raceEnabled = %v, but the binary was built with -race=%v", raceEnabled, built)
	}
}
