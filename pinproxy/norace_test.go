//go:build !race

package pinproxy

import (
	"testing"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

const raceEnabled = false

// TestRaceEnabledMatchesBuild: the build tag that chose this file and the
// build's own record of -race agree.
func TestRaceEnabledMatchesBuild(t *testing.T) {
	if built := testkit.BuiltWithRace(t); built != raceEnabled {
		t.Errorf("raceEnabled = %v, but the binary was built with -race=%v", raceEnabled, built)
	}
}
