//go:build linux

package procfile_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/procfile"
)

// TestReadRefuses: Read takes regular files only, names the path and its
// type, returns at once on a FIFO nobody writes, and not after its
// context ended.
func TestReadRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tests := []struct {
		path string
		is   error
		says string
	}{
		{fifo, procfile.ErrNotRegular, fifo + " is a named pipe (FIFO), not a regular file"},
		{dir, procfile.ErrNotRegular, dir + " is a directory, not a regular file"},
		{"/dev/null", procfile.ErrNotRegular, "/dev/null is a character device, not a regular file"},
		{sock, nil, sock}, // a socket cannot be opened: ENXIO
		{filepath.Join(dir, "nope"), os.ErrNotExist, "nope"},
	}
	for _, tt := range tests {
		done := make(chan error, 1)
		go func() { _, _, err := procfile.Read(context.Background(), tt.path, 1<<10); done <- err }()
		select {
		case err := <-done:
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("Read(%s) = %v, want %v saying %q", tt.path, err, tt.is, tt.says)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Read(%s) blocked", tt.path)
		}
		if err := procfile.Check(context.Background(), tt.path); err == nil || (tt.is != nil && !errors.Is(err, tt.is)) {
			t.Errorf("Check(%s) = %v, want %v", tt.path, err, tt.is)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := procfile.Read(ctx, "procfile.go", 1<<20); !errors.Is(err, context.Canceled) {
		t.Errorf("Read after cancel = %v, want context.Canceled", err)
	}
}

// TestReadLimit: a file of limit bytes reads whole; one byte more is
// ErrTooLarge.
func TestReadLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("12345\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	b, fi, err := procfile.Read(context.Background(), path, 6)
	if err != nil || string(b) != "12345\n" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("Read at the limit = %q, %v, %v", b, fi, err)
	}
	if _, _, err := procfile.Read(context.Background(), path, 5); !errors.Is(err, procfile.ErrTooLarge) || !strings.Contains(err.Error(), path+" is over 5 bytes") {
		t.Fatalf("Read over the limit = %v, want ErrTooLarge naming the path", err)
	}
	if b, _, err := procfile.Read(context.Background(), "/proc/self/stat", 4<<10); err != nil || len(b) == 0 {
		t.Errorf("Read(/proc/self/stat) = %d bytes, %v", len(b), err)
	}
}
