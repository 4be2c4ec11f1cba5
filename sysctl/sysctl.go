package sysctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/proofkit/nodekit/internal/atomicfile"
)

// FileName is the name of the fallback file, for /etc/sysctl.d/.
const FileName = "99-proofkit-sysctl.conf"

// Config says where to read and write. Its zero value is the agent's
// default: the live /proc (its sys/ tree and meminfo), the file in
// "config" (relative to the working directory, beside the compose file)
// and the CPUs this process may run on.
type Config struct {
	// ProcRoot is where procfs is mounted; "" means "/proc", as for
	// probe.Config. The keys are read and written under ProcRoot/sys, the
	// memory size from ProcRoot/meminfo. Tests point it at a copy in
	// testdata, an agent in a container at the host's /proc mounted
	// elsewhere.
	ProcRoot string
	// Dir is where Apply writes FileName; "" means "config".
	Dir string
	// MemBytes is the machine's memory; 0 means MemTotal from
	// ProcRoot/meminfo.
	MemBytes uint64
	// CPUs is the CPU count for the per-core anchors; 0 means
	// runtime.NumCPU().
	CPUs int
}

func (c Config) withDefaults() Config {
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.Dir == "" {
		c.Dir = "config"
	}
	if c.CPUs <= 0 {
		c.CPUs = runtime.NumCPU()
	}
	return c
}

// Plan reads every key under ProcRoot/sys and says what Apply would do,
// with WouldRaise for a key it would raise and CannotWrite for one it
// could not (mode 0444, a read-only mount, no permission). It writes
// nothing. Off Linux it returns an error wrapping errors.ErrUnsupported.
func Plan(cfg Config) (Report, error) {
	return run(cfg, false)
}

// Apply raises every key under ProcRoot/sys that is lower than its target
// and can be written, reads each back, and then writes FileName in
// cfg.Dir for the keys it could not set (or removes the file when there
// are none). It writes only its own keys, and never a key whose value it
// could not parse. The error is about the run as a whole (memory unknown,
// no /proc/sys, the file not written); per-key failures are in the
// Report. Off Linux it returns an error wrapping errors.ErrUnsupported.
func Apply(cfg Config) (Report, error) {
	return run(cfg, true)
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

// plannedHeader heads a file of values the agent was told to write
// rather than set (Plan, then WriteFile: proofkit-agent -sysctl file).
// Some of them it may not have been able to set either; the comment
// above each key says so.
const plannedHeader = `# Written by the proofkit agent (nodekit/sysctl) at its start. It was told
# to write the kernel values it would raise to this file rather than set
# them (its -sysctl file mode), so it changed nothing; the comment above
# each key says what it found. On the host, copy this file to
# /etc/sysctl.d/, run sudo sysctl --system, then restart the agent:
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
// The file is written atomically (internal/atomicfile: a reader sees the
// old file or the new one, never a part) with mode 0644: a header, which
// says the agent could not set these values, or, when keys holds a
// WouldRaise (a Plan's), that it was told not to; then a comment line
// per key with the value found and why it is there, then "key = value".
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
	if err := atomicfile.WriteFile(path, []byte(content), 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// fileContent returns the fallback file's text and how many keys it sets.
func fileContent(keys []KeyResult) (string, int) {
	var b strings.Builder
	header := fileHeader
	for _, k := range keys {
		if k.Action == WouldRaise { // a Plan's: the agent was told not to set it
			header = plannedHeader
		}
	}
	b.WriteString(header)
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

// decide is the pure step of a key: from the fields found, the target
// (Targets' form: "-" for a field left as found) and the key file's
// permission bits, what to do and the full value to hold. It returns
//
//   - AlreadyHigher (keep) when every sized field holds its target or
//     more, with the target in full form: the fields found, sized fields
//     at their targets;
//   - WouldRaise (raise) when a sized field is lower, with the fields
//     found and each lower one raised;
//   - CannotWrite when a raise is due but the file is read-only, which is
//     how the kernel marks a host-only key inside a network namespace
//     (root ignores file modes elsewhere, not here);
//   - Malformed when the target does not fit the fields found.
func decide(spec keySpec, found []uint64, target string, perm fs.FileMode) (action Action, value, reason string) {
	tv, set, err := parseTarget(target)
	if err != nil || len(tv) != len(found) {
		// Targets and specOf disagree: a bug here, not on the host.
		return Malformed, target, fmt.Sprintf("target %q does not fit %d fields", target, len(found))
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
		for i := range tv {
			if set[i] {
				want[i] = tv[i]
			}
		}
		return AlreadyHigher, formatFields(want), ""
	}
	if perm&0o222 == 0 {
		return CannotWrite, formatFields(want), readOnlyReason(spec, perm)
	}
	return WouldRaise, formatFields(want), ""
}

func readOnlyReason(spec keySpec, perm fs.FileMode) string {
	if spec.hostOnly {
		return fmt.Sprintf("host-only key: read-only inside a network namespace (mode %04o)", uint32(perm))
	}
	return fmt.Sprintf("read-only key (mode %04o)", uint32(perm))
}
