//go:build !linux

package agent

import (
	"errors"
	"fmt"
	"os"
)

// lockStateDir cannot lock a state directory off Linux: an agent there
// runs with no StateDir (in memory) or not at all, rather than with a
// directory another agent could share.
func lockStateDir(dir string) (*os.File, error) {
	return nil, fmt.Errorf("lock: %w", errors.ErrUnsupported)
}

// lockStill has no lock to look at off Linux.
func lockStill(*os.File, string) (gone, taken bool, pid int, err error) { return false, false, 0, nil }
