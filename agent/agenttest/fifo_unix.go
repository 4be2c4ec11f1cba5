//go:build unix

package agenttest

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FIFO replaces the file rel under dir's proc/ (e.g. "meminfo" or
// "sys/net/netfilter/nf_conntrack_count") with a named pipe that nothing
// writes to and returns its path: opening it for reading blocks until a
// writer comes, as a file a -proc tree should never hold. A later
// WriteNode puts the regular file back.
func FIFO(dir, rel string) (string, error) {
	path := filepath.Join(Proc(dir), filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("fifo %s: %w", rel, err)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("fifo %s: %w", rel, err)
	}
	if err := unix.Mkfifo(path, 0o644); err != nil {
		return "", fmt.Errorf("fifo %s: %w", rel, err)
	}
	return path, nil
}
