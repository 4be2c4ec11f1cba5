//go:build !unix

package agent

import (
	"errors"
	"testing"
)

func mkfifo(string) error { return errors.ErrUnsupported }

// TestMkfifo: without named pipes, the token tests that need one skip on
// the helper's ErrUnsupported.
func TestMkfifo(t *testing.T) {
	if err := mkfifo("fifo"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("mkfifo = %v, want errors.ErrUnsupported", err)
	}
}
