package overload

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Bounds on a reading's figures: beyond them a figure cannot be true of
// any machine, and a reading carrying one is refused rather than counted
// (it would pass a check on a false figure, or carry +Inf into a
// tracker's state, which then no longer marshals).
const (
	// maxLoad: the load average counts runnable and uninterruptible
	// tasks, so it cannot exceed the number of tasks Linux allows at most
	// (pid_max's ceiling, 2^22).
	maxLoad = 1 << 22
	// maxCPUs: Linux builds for at most 8192 CPUs; this leaves room.
	maxCPUs = 1 << 16
	// maxConntrackMax: nf_conntrack_max is a 32-bit integer in the kernel.
	maxConntrackMax = math.MaxUint32
	// conntrackOverMax: the entries may exceed the table's max for a
	// while after the max was lowered under a live table, but not by this
	// factor.
	conntrackOverMax = 10
	// maxDrops: connections dropped between two readings. A trillion in
	// 30 s is beyond any network card's packet rate; a kernel counter that
	// went back and was subtracted without a check gives about 1.8e19.
	maxDrops = 1_000_000_000_000
	// maxRate: bit/s on one link, 100 Tbit/s, far beyond any link made.
	maxRate = 1e14
	// maxSpeedMbps: a link speed of 100 Tbit/s. The kernel's "speed
	// unknown", -1, read as unsigned (4294967295) is above it.
	maxSpeedMbps = 100_000_000
	// rateOverSpeed: a link's rate may pass its reported speed (a virtual
	// link's speed is nominal), but not by this factor.
	rateOverSpeed = 1000
	// maxAhead bounds how far after the receiver's clock a reading may be
	// dated (ValidateAt): a node's clock set to local time instead of UTC
	// is up to 14 hours ahead, a stepped clock up to an hour.
	maxAhead = 24 * time.Hour
	// maxRunLen bounds a run id's length.
	maxRunLen = 64
)

// The earliest and latest time a reading may carry. Every clock in use
// is after 2000; the upper bound keeps time arithmetic and JSON far from
// the year 9999 that encoding/json cannot write.
var (
	minReadingTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	maxReadingTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Validate reports whether r is a reading a tracker can count, and names,
// by its field in the wire format, every figure that cannot be true:
//
//   - a known version: 1, 2 (ReadingVersion), or 0 for a reading built in
//     the process; a run (1 to 64 letters, digits, '-' or '_') and a seq
//     from 1 both or neither, and neither in version 1. A version 2
//     reading without them (a probe's, before the agent numbers it) is
//     valid, and ordered as version 1 readings are;
//   - a time from 2000 on and before 2200 (see [Reading.ValidateAt] for a
//     bound against the receiver's clock);
//   - finite figures, zero or more, none beyond any machine: memory used
//     at most 100 %, a load average at most 2^22 (Linux's most tasks), at
//     most 65536 CPUs, a conntrack max that fits the kernel's 32 bits and
//     entries less than 10 times it, fewer than 10^12 connections dropped
//     since the previous reading, and on each link rates at most
//     100 Tbit/s and less than 1000 times its speed, a speed at most
//     100 Tbit/s;
//   - at least one CPU and a non-zero conntrack max unless those inputs
//     are listed as missing; named links without duplicates; only known
//     inputs in Missing.
//
// A reading that passes cannot put a non-finite figure, or a time JSON
// cannot encode, into a [Tracker]'s state. The error wraps
// [ErrInvalidReading] and names every problem as an operator would find
// it: the reading's node, each field by its wire name, each link by its
// name, e.g. "invalid reading of node eu-01: link eth0: rx_bps NaN, want
// a finite figure".
func (r Reading) Validate() error { return r.invalid(nil) }

// ValidateAt is Validate, and also refuses a reading dated more than a
// day after now, the receiver's clock: a node's clock may be ahead by an
// hour after a step, or by a time zone when set to local time, but a
// reading from next year would hold every later reading of its node
// behind it (a version 1 reading refuses all that are older; a version 2
// run is dated after it). The package takes no clock of its own; a
// receiver passes time.Now().
func (r Reading) ValidateAt(now time.Time) error {
	late := func() error {
		if ahead := r.At.Sub(now); ahead > maxAhead {
			return fmt.Errorf("at %s, %v after the receiver's clock (%s), more than %v",
				stamp(r.At), ahead.Round(time.Second), stamp(now), maxAhead)
		}
		return nil
	}
	return r.invalid(late)
}

// invalid returns Validate's error, with that of more if it returns one:
// every problem, under one line naming the reading's node.
func (r Reading) invalid(more func() error) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch r.Version {
	case 0, ReadingVersion:
		switch {
		case r.Run != "" && r.Seq == 0:
			bad("seq 0 with run %.80q, want 1 or more", r.Run)
		case r.Run == "" && r.Seq != 0:
			bad("run missing with seq %d, want the agent's run id", r.Seq)
		}
	case 1:
		if r.Run != "" || r.Seq != 0 {
			bad("run %.80q and seq %d in version 1: they are version %d fields", r.Run, r.Seq, ReadingVersion)
		}
	default:
		bad("v %d, want 1 or %d", r.Version, ReadingVersion)
	}
	if r.Run != "" && !validRun(r.Run) {
		bad("run %.80q, want 1 to %d letters, digits, '-' or '_'", r.Run, maxRunLen)
	}
	switch {
	case r.At.IsZero():
		bad("at missing, want the time of the reading")
	case r.At.Before(minReadingTime):
		bad("at %s, before %d", stamp(r.At), minReadingTime.Year())
	case !r.At.Before(maxReadingTime):
		bad("at %s, in %d or later", stamp(r.At), maxReadingTime.Year())
	}
	var missing [numChecks]bool
	for _, in := range r.Missing {
		if !in.known() {
			bad("missing lists %.80q, not an input", in)
		}
		for i := range checkTable {
			if checkTable[i].input == in {
				missing[i] = true
			}
		}
	}
	for i := range checkTable {
		errs = append(errs, checkTable[i].invalid(r, missing[i])...)
	}
	if more != nil {
		if err := more(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w%s: %w", ErrInvalidReading, ofNode(r.Node), errors.Join(errs...))
	}
	return nil
}

// validRun reports whether s is a run id: 1 to maxRunLen letters, digits,
// '-' or '_'.
func validRun(s string) bool {
	if len(s) == 0 || len(s) > maxRunLen {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// figure returns the errors of a figure named name (its wire field) that
// must be finite, zero or more, and at most ceiling (in unit).
func figure(name string, v, ceiling float64, unit string) []error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return []error{fmt.Errorf("%s %v, want a finite figure", name, v)}
	case v < 0:
		return []error{fmt.Errorf("%s %v, want zero or more", name, v)}
	case v > ceiling:
		return []error{fmt.Errorf("%s %v, above %s%s", name, v, strconv.FormatFloat(ceiling, 'g', 8, 64), unit)}
	}
	return nil
}

// count returns the error of a count of dropped connections beyond maxDrops.
func count(name string, n uint64) []error {
	if n >= maxDrops {
		return []error{fmt.Errorf("%s %d: connections dropped since the previous reading, %d or more", name, n, uint64(maxDrops))}
	}
	return nil
}

// invalidLinks returns the errors of a reading's links, each named by the
// link's name ("link eth0: rx_bps NaN, want a finite figure"), or by its
// place in the list when it has none: names missing or twice, rates
// non-finite, negative or beyond the link, speeds absurd.
func invalidLinks(links []Link) []error {
	var errs []error
	for i, k := range links {
		link := "link " + plain(k.Name)
		if k.Name == "" {
			link = "links[" + strconv.Itoa(i) + "]"
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", link, fmt.Sprintf(format, args...)))
		}
		switch {
		case k.Name == "":
			bad("name missing, want the link's name")
		case k.SpeedMbps > maxSpeedMbps:
			bad("speed_mbps %d, above %d (100 Tbit/s)", k.SpeedMbps, uint64(maxSpeedMbps))
		}
		for j := range i {
			if k.Name != "" && links[j].Name == k.Name {
				bad("listed twice (links[%d] and links[%d])", j, i)
				break
			}
		}
		for _, x := range []struct {
			name string
			v    float64
		}{{"rx_bps", k.RxBitsPerSecond}, {"tx_bps", k.TxBitsPerSecond}} {
			if e := figure(x.name, x.v, maxRate, " bit/s (100 Tbit/s)"); e != nil {
				bad("%s", e[0])
				continue
			}
			if k.SpeedMbps > 0 && x.v > rateOverSpeed*float64(k.SpeedMbps)*1e6 {
				bad("%s %v bit/s, more than %d times the link's %s", x.name, x.v, rateOverSpeed, formatSpeed(k.SpeedMbps))
			}
		}
	}
	return errs
}

// ofNode names a reading's node for an error, " of node eu-01", or
// nothing when the reading names none.
func ofNode(node string) string {
	if node == "" {
		return ""
	}
	return " of node " + plain(node)
}

// plain returns a name as an operator writes it: as it is when it holds
// only letters, digits and . _ - @ : (an interface name, a host name),
// else quoted (and cut to 80 bytes), so no name can forge or hide an
// error's words.
func plain(name string) string {
	if name == "" || len(name) > 80 {
		return fmt.Sprintf("%.80q", name)
	}
	for i := range len(name) {
		c := name[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || strings.IndexByte("._-@:", c) >= 0) {
			return fmt.Sprintf("%q", name)
		}
	}
	return name
}

// readingJSON has Reading's fields without its methods, so the JSON
// methods can use the default encoding.
type readingJSON Reading

// MarshalJSON encodes r in the wire format. A Version of 0 (a reading
// built in the process) is sent as ReadingVersion when it has a run, else
// as version 1.
func (r Reading) MarshalJSON() ([]byte, error) {
	if r.Version == 0 {
		r.Version = 1
		if r.Run != "" {
			r.Version = ReadingVersion
		}
	}
	return json.Marshal(readingJSON(r))
}

// UnmarshalJSON decodes a reading in the wire format, version 1 or 2. It
// rejects any other version (a missing "v" included) and readings that do
// not pass [Reading.Validate]; the errors wrap [ErrInvalidReading]. Unknown
// fields are ignored, so a sender may add information.
func (r *Reading) UnmarshalJSON(b []byte) error {
	var v readingJSON
	if !decodePlain(b, (*Reading)(&v)) {
		// Into slow, not v, which then stays on the stack.
		var slow readingJSON
		if err := json.Unmarshal(b, &slow); err != nil {
			return fmt.Errorf("decode reading: %w: %w", ErrInvalidReading, err)
		}
		v = slow
	}
	if v.Version != 1 && v.Version != ReadingVersion {
		return fmt.Errorf("decode reading: %w%s: v %d, want 1 or %d", ErrInvalidReading, ofNode(v.Node), v.Version, ReadingVersion)
	}
	if err := Reading(v).Validate(); err != nil {
		return fmt.Errorf("decode reading: %w", err)
	}
	*r = Reading(v)
	return nil
}
