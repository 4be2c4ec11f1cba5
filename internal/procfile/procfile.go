// Package procfile reads the small kernel files under /proc and /sys, or
// a tree standing for them (a host's files mounted into a container, a
// test's fixtures), without ever blocking: it opens a path without
// blocking, refuses anything but a regular file (opening a FIFO for
// reading blocks until a writer comes, and reading one until it writes),
// and reads a bounded number of bytes.
//
//	b, _, err := procfile.Read(ctx, "/proc/sys/net/core/somaxconn", 4<<10)
//	if errors.Is(err, procfile.ErrNotRegular) { … }
package procfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular marks a path that is not a regular file: a FIFO, a
// device, a socket or a directory where a kernel file should be.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge marks a file longer than the limit its reader gave.
var ErrTooLarge = errors.New("too large")

// Open opens path for reading without blocking and returns it with its
// FileInfo, unless it is not a regular file: then the error names the
// path and its type and wraps ErrNotRegular. ctx ending before the open
// fails it.
func Open(ctx context.Context, path string) (*os.File, fs.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is %s, %w", path, kind(fi.Mode()), ErrNotRegular)
	}
	return f, fi, nil
}

// Check fails as Open does unless path is a regular file: for a reader,
// such as procfs, that opens the file itself.
func Check(ctx context.Context, path string) error {
	f, _, err := Open(ctx, path)
	if err != nil {
		return err
	}
	return f.Close()
}

// Read reads path whole as Open opens it, and returns its content and
// FileInfo. A file of more than limit bytes is an error that names the
// path and wraps ErrTooLarge.
func Read(ctx context.Context, path string, limit int) ([]byte, fs.FileInfo, error) {
	f, fi, err := Open(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, nil, err
	}
	if len(b) > limit {
		return nil, nil, fmt.Errorf("%s is over %d bytes: %w", path, limit, ErrTooLarge)
	}
	return b, fi, nil
}

// kind names a mode's file type for an error.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "of type " + m.Type().String()
}
