package sysctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/internal/procfile"
)

func run(cfg Config, apply bool) (Report, error) {
	cfg = cfg.withDefaults()
	if fi, err := os.Stat(cfg.ProcRoot); err == nil && !fi.IsDir() {
		return Report{}, fmt.Errorf("proc root %s is not a directory", cfg.ProcRoot)
	}
	mem := cfg.MemBytes
	if mem == 0 {
		var err error
		if mem, err = memTotal(cfg.ProcRoot); err != nil {
			return Report{}, err
		}
	}
	root := filepath.Join(cfg.ProcRoot, "sys")
	if fi, err := os.Stat(root); err != nil {
		return Report{}, fmt.Errorf("reading sysctl root: %w", err)
	} else if !fi.IsDir() {
		return Report{}, fmt.Errorf("sysctl root %s is not a directory", root)
	}
	var r Report
	for _, t := range Targets(mem, cfg.CPUs) {
		r.Keys = append(r.Keys, setKey(root, t, apply))
	}
	if !apply {
		return r, nil
	}
	path, err := WriteFile(cfg.Dir, r.Keys)
	r.File = path
	return r, err
}

// setKey reads one key, decides (decide) and, when apply is set and a
// raise is due, writes it and reads it back.
func setKey(root string, t Target, apply bool) KeyResult {
	spec := specOf(t.Key)
	res := KeyResult{Key: t.Key, Target: t.Value}
	path := filepath.Join(root, filepath.FromSlash(strings.ReplaceAll(t.Key, ".", "/")))

	raw, perm, err := readKeyFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return absent(res, spec, path)
	case errors.Is(err, procfile.ErrNotRegular), errors.Is(err, procfile.ErrTooLarge):
		res.Action, res.Reason = Malformed, err.Error()
		return res
	case err != nil:
		res.Action, res.Reason = CannotRead, err.Error()
		return res
	}
	found, err := parseValue(raw, spec.fields)
	if err != nil {
		res.Found = oneLine(raw)
		res.Action, res.Reason = Malformed, err.Error()
		return res
	}
	res.Found = formatFields(found)
	res.Action, res.Target, res.Reason = decide(spec, found, t.Value, perm)
	if res.Action != WouldRaise {
		return res
	}
	if !apply {
		if err := unix.Access(path, unix.W_OK); err != nil {
			res.Action, res.Reason = CannotWrite, writeReason(spec, err)
		}
		return res
	}
	res.Action, res.Reason = write(path, spec, res.Target, t.Value, perm)
	return res
}

// write writes value to the key at path and reads it back: Raised when the
// kernel now holds the target (decide says keep), else CannotWrite and why.
func write(path string, spec keySpec, value, target string, perm fs.FileMode) (Action, string) {
	if err := writeValue(path, value); err != nil {
		return CannotWrite, writeReason(spec, err)
	}
	raw, _, err := readKeyFile(path)
	if err != nil {
		return CannotWrite, fmt.Sprintf("wrote %s but cannot read it back: %v", value, err)
	}
	now, err := parseValue(raw, spec.fields)
	if err != nil {
		return CannotWrite, fmt.Sprintf("wrote %s but the kernel holds %q", value, oneLine(raw))
	}
	if a, _, _ := decide(spec, now, target, perm); a != AlreadyHigher {
		return CannotWrite, fmt.Sprintf("wrote %s but the kernel holds %q", value, oneLine(raw))
	}
	return Raised, ""
}

// maxKeySize bounds a key's file: a few numbers.
const maxKeySize = 4 << 10

// readKeyFile reads a /proc/sys file and returns its text and permission
// bits. It opens the file without blocking and refuses anything but a
// regular file (a FIFO in a -proc tree would block the read) and a file
// over maxKeySize, naming the path (see procfile.Read).
func readKeyFile(path string) (string, fs.FileMode, error) {
	b, fi, err := procfile.Read(context.Background(), path, maxKeySize)
	if err != nil {
		return "", 0, err
	}
	return string(b), fi.Mode().Perm(), nil
}

// memTotal reads MemTotal, in bytes, from procRoot's meminfo with procfs.
func memTotal(procRoot string) (uint64, error) {
	path := filepath.Join(procRoot, "meminfo")
	// Before procfs opens it, which would block on a FIFO.
	if err := procfile.Check(context.Background(), path); err != nil {
		return 0, fmt.Errorf("reading memory size: %w", err)
	}
	pfs, err := procfs.NewFS(procRoot)
	if err != nil {
		return 0, fmt.Errorf("reading memory size: %w", err)
	}
	mi, err := pfs.Meminfo()
	if err == nil {
		var v uint64
		if v, err = memTotalBytes(mi); err == nil {
			return v, nil
		}
	}
	return 0, fmt.Errorf("reading memory size from %s: %w", path, err)
}

// memTotalBytes checks meminfo's MemTotal and returns it in bytes.
func memTotalBytes(mi procfs.Meminfo) (uint64, error) {
	switch {
	case mi.MemTotal == nil:
		return 0, errors.New("no MemTotal line")
	case mi.MemTotalBytes == nil || *mi.MemTotalBytes != *mi.MemTotal<<10:
		return 0, fmt.Errorf("MemTotal %d without kB: want \"MemTotal: N kB\"", *mi.MemTotal)
	case *mi.MemTotal == 0 || *mi.MemTotal > 1<<54:
		return 0, fmt.Errorf("MemTotal %d kB: not a memory size", *mi.MemTotal)
	}
	return *mi.MemTotal << 10, nil
}

// absent explains a key the tree does not have.
func absent(res KeyResult, spec keySpec, path string) KeyResult {
	res.Action = NotPresent
	switch {
	case spec.absentInNetns && dirHasFiles(filepath.Dir(path)):
		// The directory is there, the key is not: the kernel hides this
		// host-only key from network namespaces. The host needs it set.
		res.Action = CannotWrite
		res.Reason = "host-only key: not visible inside a network namespace"
	case spec.module != "":
		res.Reason = spec.module + " module not loaded"
	default:
		res.Reason = "no such key in this kernel"
	}
	return res
}

func dirHasFiles(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) > 0
}

func writeReason(spec keySpec, err error) string {
	switch {
	case errors.Is(err, unix.EROFS):
		return "read-only /proc/sys (EROFS), as in a Docker container"
	case spec.hostOnly && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)):
		return fmt.Sprintf("host-only key: not writable from this network namespace or without CAP_NET_ADMIN on the host (%v)", unwrapErrno(err))
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		return fmt.Sprintf("no permission: needs root with CAP_NET_ADMIN (%v)", unwrapErrno(err))
	default:
		return "write failed: " + err.Error()
	}
}

func unwrapErrno(err error) error {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return err
}

// writeValue writes v to a /proc/sys file as sysctl(8) does: one write of
// the value and a newline.
func writeValue(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
