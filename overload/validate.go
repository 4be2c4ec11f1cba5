package overload

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Validate reports whether r is a reading a tracker can count: a known
// version (ReadingVersion, or 0 for a reading built in the process), a
// time, finite non-negative figures, memory used at most 100 %, at least
// one CPU and a non-zero conntrack max unless those inputs are listed as
// missing, named links without duplicates, and only known inputs in
// Missing. The error wraps [ErrInvalidReading] and names every problem.
func (r Reading) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.Version != 0 && r.Version != ReadingVersion {
		bad("version %d, want %d", r.Version, ReadingVersion)
	}
	if r.At.IsZero() {
		bad("no time")
	}
	missing := make(map[Input]bool, len(r.Missing))
	for _, in := range r.Missing {
		switch in {
		case InputMemory, InputLoad, InputConntrack, InputConntrackDrops, InputListenDrops, InputBandwidth:
			missing[in] = true
		default:
			bad("unknown missing input %q", in)
		}
	}
	figure := func(name string, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			bad("%s is %v, want a finite figure, zero or more", name, v)
		}
	}
	figure("memory used percent", r.MemoryUsedPercent)
	if r.MemoryUsedPercent > 100 {
		bad("memory used percent is %v, above 100", r.MemoryUsedPercent)
	}
	figure("load15", r.Load15)
	if r.CPUs < 0 || (r.CPUs == 0 && !missing[InputLoad]) {
		bad("cpus is %d, want 1 or more (or load listed as missing)", r.CPUs)
	}
	if r.ConntrackMax == 0 && !missing[InputConntrack] {
		bad("conntrack max is 0 (list conntrack as missing when the table is unknown)")
	}
	seen := make(map[string]bool, len(r.Links))
	for i, k := range r.Links {
		switch {
		case k.Name == "":
			bad("link %d has no name", i)
		case seen[k.Name]:
			bad("link %q listed twice", k.Name)
		}
		seen[k.Name] = true
		figure(fmt.Sprintf("link %q rx bits per second", k.Name), k.RxBitsPerSecond)
		figure(fmt.Sprintf("link %q tx bits per second", k.Name), k.TxBitsPerSecond)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidReading, errors.Join(errs...))
	}
	return nil
}

// readingJSON has Reading's fields without its methods, so the JSON
// methods can use the default encoding.
type readingJSON Reading

// MarshalJSON encodes r in the wire format. A Version of 0 (a reading
// built in the process) is sent as ReadingVersion.
func (r Reading) MarshalJSON() ([]byte, error) {
	if r.Version == 0 {
		r.Version = ReadingVersion
	}
	return json.Marshal(readingJSON(r))
}

// UnmarshalJSON decodes a reading in the wire format. It rejects any
// version but ReadingVersion (a missing "v" included) and readings that
// do not pass [Reading.Validate]; the errors wrap [ErrInvalidReading].
// Unknown fields are ignored, so a sender may add information.
func (r *Reading) UnmarshalJSON(b []byte) error {
	var v readingJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("decode reading: %w: %w", ErrInvalidReading, err)
	}
	if v.Version != ReadingVersion {
		return fmt.Errorf("decode reading: %w: version %d, want %d", ErrInvalidReading, v.Version, ReadingVersion)
	}
	if err := Reading(v).Validate(); err != nil {
		return fmt.Errorf("decode reading: %w", err)
	}
	*r = Reading(v)
	return nil
}
