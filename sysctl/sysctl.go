package sysctl

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// FileName is the name of the fallback file, for /etc/sysctl.d/.
const FileName = "99-proofkit-sysctl.conf"

// Config says where to read and write. Its zero value is the agent's
// default: the live /proc/sys, the file in "config" (relative to the
// working directory, beside the compose file), memory from /proc/meminfo
// and the CPUs this process may run on.
type Config struct {
	// Root is the /proc/sys tree; "" means "/proc/sys". Tests point it at
	// a copy in testdata, an agent at a host's /proc/sys mounted elsewhere.
	Root string
	// Dir is where Apply writes FileName; "" means "config".
	Dir string
	// MemBytes is the machine's memory; 0 means MemTotal from MemInfoPath.
	MemBytes uint64
	// MemInfoPath is read when MemBytes is 0; "" means "/proc/meminfo".
	MemInfoPath string
	// CPUs is the CPU count for the per-core anchors; 0 means
	// runtime.NumCPU().
	CPUs int
}

func (c Config) withDefaults() Config {
	if c.Root == "" {
		c.Root = "/proc/sys"
	}
	if c.Dir == "" {
		c.Dir = "config"
	}
	if c.MemInfoPath == "" {
		c.MemInfoPath = "/proc/meminfo"
	}
	if c.CPUs <= 0 {
		c.CPUs = runtime.NumCPU()
	}
	return c
}

// Action is what was done, or in a Plan what would be done, with one key.
type Action string

const (
	// Raised: the value was lower than the target and now holds it.
	Raised Action = "raised"
	// WouldRaise (Plan only): the value is lower than the target and the
	// key looks writable.
	WouldRaise Action = "would raise"
	// AlreadyHigher: every sized field already holds the target or more;
	// nothing is written (the package never lowers a value).
	AlreadyHigher Action = "already higher"
	// CannotWrite: the value is lower than the target (or, for a host-only
	// key a network namespace does not show, unknown) and cannot be set
	// from here; Reason says why. These keys go into FileName.
	CannotWrite Action = "cannot write"
	// NotPresent: the kernel has no such key (for the conntrack keys: the
	// nf_conntrack module is not loaded).
	NotPresent Action = "not present"
	// Malformed: the value found is not what the key should hold (wrong
	// number of fields, not a number); it is reported and left alone.
	Malformed Action = "malformed"
	// CannotRead: the key exists but could not be read; left alone.
	CannotRead Action = "cannot read"
)

// needsFile reports whether a result belongs in the fallback file.
func (a Action) needsFile() bool { return a == CannotWrite || a == WouldRaise }

// KeyResult is one line of a run: the key, the value found, the value
// aimed at, and what was done.
//
// Found is the value as the kernel showed it, fields separated by one
// space ("" when it could not be read). Target is the full value to hold:
// for a multi-value key, the fields found with each sized field raised to
// its target (so "4096 131072 16777216" for tcp_rmem); when the value
// found is unknown or malformed, the Target's own form ("- - 16777216").
// Reason explains CannotWrite, NotPresent, Malformed and CannotRead.
type KeyResult struct {
	Key    string
	Found  string
	Target string
	Action Action
	Reason string
}

// String is the key's log line, e.g.
// "net.core.somaxconn: found 4096, target 65535: raised".
func (k KeyResult) String() string {
	found := k.Found
	if found == "" {
		found = "unknown"
	}
	s := fmt.Sprintf("%s: found %s, target %s: %s", k.Key, found, k.Target, k.Action)
	if k.Reason != "" {
		s += " (" + k.Reason + ")"
	}
	return s
}

// Report is the result of Plan or Apply: one KeyResult per key, in the
// order of Targets, and the fallback file Apply wrote ("" when it wrote
// none and removed any left from an earlier start).
type Report struct {
	Keys []KeyResult
	File string
}

// String is the report as log lines, one per key, then the file if any.
func (r Report) String() string {
	var b strings.Builder
	for _, k := range r.Keys {
		b.WriteString(k.String())
		b.WriteByte('\n')
	}
	if r.File != "" {
		fmt.Fprintf(&b, "wrote %s: copy it to /etc/sysctl.d/, run sudo sysctl --system, restart the agent\n", r.File)
	}
	return b.String()
}

const fileHeader = `# Written by the proofkit agent (nodekit/sysctl) at its start: it could not
# set these kernel values itself, because /proc/sys is read-only in its
# container, the keys belong to the host and the agent runs in its own
# network namespace, or it runs without root; the comment above each key
# says which. On the host, copy this file to /etc/sysctl.d/, run
# sudo sysctl --system, then restart the agent:
#
#   sudo cp 99-proofkit-sysctl.conf /etc/sysctl.d/
#   sudo sysctl --system
#
# Every value here is a raise over what the agent found; it never lowers a
# size the host holds higher. The agent rewrites this file at each start
# and removes it when nothing is left to set.
`

// WriteFile writes FileName in dir with every key of keys whose Action is
// CannotWrite or WouldRaise (so the agent's "write the file only" mode is
// Plan then WriteFile of its Keys) and returns its path. Other keys are
// left out, so a malformed value is never written over. With no such key
// it removes any file an earlier start left and returns "".
//
// The file is written atomically (a temporary file in dir, then rename)
// with mode 0644: a comment line per key with the value found and why the
// agent could not set it, then "key = value".
func WriteFile(dir string, keys []KeyResult) (string, error) {
	if dir == "" {
		dir = "config"
	}
	path := filepath.Join(dir, FileName)
	content, n := fileContent(keys)
	if n == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("removing %s, which has nothing left to set: %w", path, err)
		}
		return "", nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("making directory for %s: %w", FileName, err)
	}
	tmp, err := os.CreateTemp(dir, "."+FileName+".*")
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = tmp.WriteString(content)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil { // make the rename durable
		_ = d.Sync()
		_ = d.Close()
	}
	return path, nil
}

// fileContent returns the fallback file's text and how many keys it sets.
func fileContent(keys []KeyResult) (string, int) {
	var b strings.Builder
	b.WriteString(fileHeader)
	n := 0
	for _, k := range keys {
		if !k.Action.needsFile() || !validLine(k.Key, k.Target) {
			continue
		}
		n++
		why := k.Reason
		if why == "" {
			why = "lower than the target"
		}
		if k.Found == "" {
			fmt.Fprintf(&b, "\n# %s; the host's value is unknown here: drop this line if the host already holds more\n", oneLine(why))
		} else {
			fmt.Fprintf(&b, "\n# %s; found %s\n", oneLine(why), k.Found)
		}
		fmt.Fprintf(&b, "%s = %s\n", k.Key, k.Target)
	}
	return b.String(), n
}

// validLine reports whether key = value is a line this package may write:
// a dotted key and a value of decimal fields (no "-": a multi-value key
// whose other fields are unknown is not written).
func validLine(key, value string) bool {
	if key == "" || strings.ContainsAny(key, " \t\n=/") {
		return false
	}
	f := strings.Fields(value)
	if len(f) == 0 {
		return false
	}
	for _, x := range f {
		if _, err := strconv.ParseUint(x, 10, 64); err != nil {
			return false
		}
	}
	return true
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// memTotal reads MemTotal, in bytes, from a /proc/meminfo file.
func memTotal(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("reading memory size: %w", err)
	}
	defer f.Close()
	v, err := parseMemTotal(f)
	if err != nil {
		return 0, fmt.Errorf("reading memory size from %s: %w", path, err)
	}
	return v, nil
}

// parseMemTotal finds "MemTotal: N kB" in meminfo text.
func parseMemTotal(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("MemTotal line %q: want \"MemTotal: N kB\"", sc.Text())
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || kb == 0 || kb > 1<<54 {
			return 0, fmt.Errorf("MemTotal line %q: not a memory size", sc.Text())
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no MemTotal line")
}
