package sysctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Plan reads every key under cfg.Root and says what Apply would do, with
// WouldRaise for a key it would raise and CannotWrite for one it could not
// (mode 0444, a read-only mount, no permission). It writes nothing.
func Plan(cfg Config) (Report, error) {
	return run(cfg, false)
}

// Apply raises every key under cfg.Root that is lower than its target and
// can be written, reads each back, and then writes FileName in cfg.Dir for
// the keys it could not set (or removes the file when there are none).
// It writes only its own keys, and never a key whose value it could not
// parse. The error is about the run as a whole (memory unknown, no
// /proc/sys, the file not written); per-key failures are in the Report.
func Apply(cfg Config) (Report, error) {
	return run(cfg, true)
}

func run(cfg Config, apply bool) (Report, error) {
	cfg = cfg.withDefaults()
	mem := cfg.MemBytes
	if mem == 0 {
		var err error
		if mem, err = memTotal(cfg.MemInfoPath); err != nil {
			return Report{}, err
		}
	}
	if fi, err := os.Stat(cfg.Root); err != nil {
		return Report{}, fmt.Errorf("reading sysctl root: %w", err)
	} else if !fi.IsDir() {
		return Report{}, fmt.Errorf("sysctl root %s is not a directory", cfg.Root)
	}
	var r Report
	for _, t := range Targets(mem, cfg.CPUs) {
		r.Keys = append(r.Keys, setKey(cfg.Root, t, apply))
	}
	if !apply {
		return r, nil
	}
	path, err := WriteFile(cfg.Dir, r.Keys)
	r.File = path
	return r, err
}

// setKey reads one key and, when apply is set, raises it.
func setKey(root string, t Target, apply bool) KeyResult {
	spec := specOf(t.Key)
	res := KeyResult{Key: t.Key, Target: t.Value}
	path := filepath.Join(root, filepath.FromSlash(strings.ReplaceAll(t.Key, ".", "/")))

	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return absent(res, spec, path)
	case err != nil:
		res.Action, res.Reason = CannotRead, err.Error()
		return res
	case !fi.Mode().IsRegular():
		res.Action, res.Reason = Malformed, fmt.Sprintf("%s is not a file", path)
		return res
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		res.Action, res.Reason = CannotRead, err.Error()
		return res
	}
	found, err := parseValue(string(raw), spec.fields)
	if err != nil {
		res.Found = oneLine(string(raw))
		res.Action, res.Reason = Malformed, err.Error()
		return res
	}
	res.Found = formatFields(found)
	tv, set, err := parseTarget(t.Value)
	if err != nil || len(tv) != len(found) {
		// Targets and specOf disagree: a bug here, not on the host.
		res.Action, res.Reason = Malformed, fmt.Sprintf("target %q does not fit %d fields", t.Value, len(found))
		return res
	}
	want := make([]uint64, len(found))
	raise := false
	for i := range found {
		want[i] = found[i]
		if set[i] && found[i] < tv[i] {
			want[i], raise = tv[i], true
		}
	}
	if !raise {
		// Show the target in full form: the fields found, sized fields
		// at their targets.
		for i := range tv {
			if set[i] {
				want[i] = tv[i]
			}
		}
		res.Target = formatFields(want)
		res.Action = AlreadyHigher
		return res
	}
	res.Target = formatFields(want)

	// A read-only mode is how the kernel marks a host-only key inside a
	// network namespace; root ignores file modes elsewhere, not here.
	if fi.Mode().Perm()&0o222 == 0 {
		res.Action, res.Reason = CannotWrite, readOnlyReason(spec, fi.Mode().Perm())
		return res
	}
	if !apply {
		if err := unix.Access(path, unix.W_OK); err != nil {
			res.Action, res.Reason = CannotWrite, writeReason(spec, err)
			return res
		}
		res.Action = WouldRaise
		return res
	}
	if err := writeValue(path, res.Target); err != nil {
		res.Action, res.Reason = CannotWrite, writeReason(spec, err)
		return res
	}
	raw, err = os.ReadFile(path)
	if err != nil {
		res.Action, res.Reason = CannotWrite, fmt.Sprintf("wrote %s but cannot read it back: %v", res.Target, err)
		return res
	}
	now, err := parseValue(string(raw), spec.fields)
	if err == nil {
		for i := range now {
			if set[i] && now[i] < tv[i] {
				err = errors.New("lower")
			}
		}
	}
	if err != nil {
		res.Action, res.Reason = CannotWrite, fmt.Sprintf("wrote %s but the kernel holds %q", res.Target, oneLine(string(raw)))
		return res
	}
	res.Action = Raised
	return res
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

func readOnlyReason(spec keySpec, perm fs.FileMode) string {
	if spec.hostOnly {
		return fmt.Sprintf("host-only key: read-only inside a network namespace (mode %04o)", uint32(perm))
	}
	return fmt.Sprintf("read-only key (mode %04o)", uint32(perm))
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
