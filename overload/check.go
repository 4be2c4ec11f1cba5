package overload

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Check names one of the checks a reading is evaluated against.
type Check string

// The checks, in the order notices name them.
const (
	CheckMemory         Check = "memory"          // memory used above MemoryPercent
	CheckLoad           Check = "load"            // load15 above LoadPerCPU × CPUs
	CheckConntrackFill  Check = "conntrack_fill"  // conntrack entries at or above ConntrackFillPercent of max
	CheckConntrackDrops Check = "conntrack_drops" // more than ConntrackDrops dropped by a full table
	CheckListenQueue    Check = "listen_queue"    // at least ListenDrops dropped by full listen queues
	CheckBandwidth      Check = "bandwidth"       // a link above BandwidthPercent of its speed
)

// checkDef is one check, one entry of checkTable: its name, the input it
// reads, what in that input's figures cannot be true, and how it is
// evaluated and worded. Everything else (notice order, windows, state,
// validation of Missing) follows from the table, so a new check is its
// Check name and one entry here, plus its threshold in Limits, its
// figures in Reading (with an Input name when it reads a new one) and a
// source in the probe.
type checkDef struct {
	check Check
	input Input
	// invalid reports, one error each, the figures of the check's input
	// in r that cannot be true. missing says whether r lists the input as
	// missing: a figure that is required only when the input was measured
	// (a CPU count, a table's size) is excused then, but no figure may be
	// non-finite or absurd either way.
	invalid func(r Reading, missing bool) []error
	// evaluate applies the check to a reading whose input is not missing,
	// by l (defaults filled in), and words the finding: Check, Value,
	// Limit, Text and Link; Evaluate sets At.
	evaluate func(r Reading, l Limits) (Finding, bool)
	// describe words the figure the check compares in r and the limit l
	// (defaults filled in) sets for it, for [Check.Describe]; r is nil
	// before the first reading, and then figure is "".
	describe func(r *Reading, l Limits) (figure, limit string)
}

// checkTable lists every check in notice order.
var checkTable = [...]checkDef{
	{
		check: CheckMemory, input: InputMemory,
		invalid: func(r Reading, _ bool) []error {
			return figure("memory_used_percent", r.MemoryUsedPercent, 100, " %")
		},
		evaluate: func(r Reading, l Limits) (Finding, bool) {
			v := r.MemoryUsedPercent
			if !(v > l.MemoryPercent) {
				return Finding{}, false
			}
			return Finding{Check: CheckMemory, Value: v, Limit: l.MemoryPercent,
				Text: "memory at " + formatAbove(v, l.MemoryPercent, 0, true) + " %"}, true
		},
		describe: func(r *Reading, l Limits) (string, string) {
			return with(r, func(r Reading) string { return fmt.Sprintf("%.1f %%", r.MemoryUsedPercent) }),
				fmt.Sprintf("above %g %%", l.MemoryPercent)
		},
	},
	{
		check: CheckLoad, input: InputLoad,
		invalid: func(r Reading, missing bool) []error {
			errs := figure("load15", r.Load15, maxLoad, "")
			switch {
			case r.CPUs < 0 || r.CPUs > maxCPUs:
				errs = append(errs, fmt.Errorf("cpus %d, want 1 to %d", r.CPUs, maxCPUs))
			case r.CPUs == 0 && !missing:
				errs = append(errs, fmt.Errorf("cpus 0, want 1 or more (or load listed as missing)"))
			}
			return errs
		},
		evaluate: func(r Reading, l Limits) (Finding, bool) {
			if r.CPUs < 1 {
				return Finding{}, false
			}
			limit := l.LoadPerCPU * float64(r.CPUs)
			v := r.Load15
			if !(v > limit) {
				return Finding{}, false
			}
			return Finding{Check: CheckLoad, Value: v, Limit: limit,
				Text: fmt.Sprintf("load average %s over 15 minutes, above %s %s",
					formatAbove(v, limit, 1, true), timesWord(l.LoadPerCPU), cores(r.CPUs))}, true
		},
		describe: func(r *Reading, l Limits) (string, string) {
			if r == nil {
				return "", fmt.Sprintf("above %g × CPUs", l.LoadPerCPU)
			}
			return fmt.Sprintf("%.2f on %d CPUs", r.Load15, r.CPUs),
				fmt.Sprintf("above %g (%g × %d CPUs)", l.LoadPerCPU*float64(r.CPUs), l.LoadPerCPU, r.CPUs)
		},
	},
	{
		check: CheckConntrackFill, input: InputConntrack,
		invalid: func(r Reading, missing bool) []error {
			var errs []error
			switch {
			case r.ConntrackMax > maxConntrackMax:
				errs = append(errs, fmt.Errorf("conntrack_max %d, above any kernel's %d", r.ConntrackMax, uint64(maxConntrackMax)))
			case r.ConntrackMax == 0 && !missing:
				errs = append(errs, fmt.Errorf("conntrack_max 0, want the table's size (or conntrack listed as missing)"))
			case r.ConntrackMax > 0 && r.ConntrackEntries/conntrackOverMax >= r.ConntrackMax:
				errs = append(errs, fmt.Errorf("conntrack_entries %d, %d times the table's max of %d or more",
					r.ConntrackEntries, conntrackOverMax, r.ConntrackMax))
			}
			return errs
		},
		evaluate: func(r Reading, l Limits) (Finding, bool) {
			if r.ConntrackMax == 0 {
				return Finding{}, false
			}
			// Compare entries × 100 with limit × max, not a rounded ratio,
			// so a table exactly at its limit passes.
			if !(float64(r.ConntrackEntries)*100 >= l.ConntrackFillPercent*float64(r.ConntrackMax)) {
				return Finding{}, false
			}
			v := float64(r.ConntrackEntries) * 100 / float64(r.ConntrackMax)
			return Finding{Check: CheckConntrackFill, Value: v, Limit: l.ConntrackFillPercent,
				Text: fmt.Sprintf("the connection table at %s %% (%d of %d)",
					formatAbove(v, l.ConntrackFillPercent, 0, false), r.ConntrackEntries, r.ConntrackMax)}, true
		},
		describe: func(r *Reading, l Limits) (string, string) {
			return with(r, func(r Reading) string {
				fill := math.NaN()
				if r.ConntrackMax > 0 {
					fill = 100 * float64(r.ConntrackEntries) / float64(r.ConntrackMax)
				}
				return fmt.Sprintf("%.1f %% (%d of %d)", fill, r.ConntrackEntries, r.ConntrackMax)
			}), fmt.Sprintf("%g %% or more", l.ConntrackFillPercent)
		},
	},
	{
		check: CheckConntrackDrops, input: InputConntrackDrops,
		invalid: func(r Reading, _ bool) []error { return count("conntrack_drops", r.ConntrackDrops) },
		evaluate: func(r Reading, l Limits) (Finding, bool) {
			if r.ConntrackDrops <= l.ConntrackDrops {
				return Finding{}, false
			}
			return Finding{Check: CheckConntrackDrops, Value: float64(r.ConntrackDrops), Limit: float64(l.ConntrackDrops),
				Text: "the connection table was full: " + dropped(r.ConntrackDrops)}, true
		},
		describe: func(r *Reading, l Limits) (string, string) {
			return with(r, func(r Reading) string { return fmt.Sprintf("%d dropped", r.ConntrackDrops) }),
				fmt.Sprintf("more than %d dropped", l.ConntrackDrops)
		},
	},
	{
		check: CheckListenQueue, input: InputListenDrops,
		invalid: func(r Reading, _ bool) []error { return count("listen_drops", r.ListenDrops) },
		evaluate: func(r Reading, l Limits) (Finding, bool) {
			if r.ListenDrops < l.ListenDrops {
				return Finding{}, false
			}
			return Finding{Check: CheckListenQueue, Value: float64(r.ListenDrops), Limit: float64(l.ListenDrops),
				Text: "listen queues were full: " + dropped(r.ListenDrops)}, true
		},
		describe: func(r *Reading, l Limits) (string, string) {
			return with(r, func(r Reading) string { return fmt.Sprintf("%d dropped", r.ListenDrops) }),
				fmt.Sprintf("%d or more dropped", l.ListenDrops)
		},
	},
	{
		check: CheckBandwidth, input: InputBandwidth,
		invalid:  func(r Reading, _ bool) []error { return invalidLinks(r.Links) },
		evaluate: evaluateBandwidth,
		describe: func(r *Reading, l Limits) (string, string) {
			return with(r, func(r Reading) string {
				if u, link, ok := BusiestLink(r.Links); ok && !math.IsNaN(u) {
					return fmt.Sprintf("%.1f %% on %s", u, link)
				}
				return "no link with a known speed"
			}), fmt.Sprintf("above %g %% of a link", l.BandwidthPercent)
		},
	},
}

const numChecks = len(checkTable)

// checks lists every check in notice order. It is a function, not a
// variable, so no caller can change it.
func checks() [numChecks]Check {
	var out [numChecks]Check
	for i, d := range &checkTable {
		out[i] = d.check
	}
	return out
}

// Checks returns every check, in the order notices name them.
func Checks() []Check {
	c := checks()
	return c[:]
}

// index returns c's position in notice order, or -1 for an unknown check.
func (c Check) index() int {
	for i := range checkTable {
		if checkTable[i].check == c {
			return i
		}
	}
	return -1
}

// Input returns the input c reads: a reading that lists it as missing
// does not pass c. An unknown check reads no input ("").
func (c Check) Input() Input {
	if i := c.index(); i >= 0 {
		return checkTable[i].input
	}
	return ""
}

// Describe words, as a status page shows them, the figure c compares in
// r and the limit l sets for it: ("95.0 %", "above 90 %") for memory,
// ("17.30 on 8 CPUs", "above 16 (2 × 8 CPUs)") for load. Zero fields of
// l mean their defaults. With r nil (no reading yet) the figure is ""
// and the limit is worded without a reading ("above 2 × CPUs"). Describe
// does not look at r.Missing: a figure whose input is missing (see
// [Check.Input]) means nothing, and the caller says so instead. An
// unknown check returns "", "".
func (c Check) Describe(r *Reading, l Limits) (figure, limit string) {
	i := c.index()
	if i < 0 {
		return "", ""
	}
	return checkTable[i].describe(r, l.withDefaults())
}

// with returns "" for no reading, else fig(*r).
func with(r *Reading, fig func(Reading) string) string {
	if r == nil {
		return ""
	}
	return fig(*r)
}

// BusiestLink returns, of the links whose speed is known, the one whose
// larger rate (receive or transmit) is the highest share of its speed,
// with that share in percent; the first listed wins a tie. ok is false
// when no link has a known speed.
func BusiestLink(links []Link) (percent float64, name string, ok bool) {
	percent = math.NaN()
	for _, l := range links {
		if l.SpeedMbps == 0 {
			continue
		}
		u := 100 * max(l.RxBitsPerSecond, l.TxBitsPerSecond) / (float64(l.SpeedMbps) * 1e6)
		if !ok || math.IsNaN(percent) || u > percent {
			percent, name, ok = u, l.Name, true
		}
	}
	return percent, name, ok
}

// WithDefaults returns l with every zero field replaced by its default,
// as a [Tracker] reads it (ConntrackDrops's default is its zero value;
// Need's is at most Window).
func (l Limits) WithDefaults() Limits { return l.withDefaults() }

// known reports whether some check reads the input in.
func (in Input) known() bool {
	for i := range checkTable {
		if checkTable[i].input == in {
			return true
		}
	}
	return false
}

// Finding is one check passed in one reading, with its figures.
type Finding struct {
	// Check is the check that passed.
	Check Check `json:"check"`
	// Text says it in the notice's words and figures, e.g.
	// "memory at 92 %" or "the connection table was full: 37 connections
	// dropped".
	Text string `json:"text"`
	// At is the time of the reading the figures come from: the latest
	// reading in which the check passed.
	At time.Time `json:"at"`
	// Value is the figure compared: memory used %, the load average, the
	// conntrack table's fill %, a count of dropped connections, or a
	// link's rate as % of its speed.
	Value float64 `json:"value"`
	// Limit is what Value was compared with: the threshold in the same
	// unit (for the load check, LoadPerCPU × CPUs).
	Limit float64 `json:"limit"`
	// Link names the link, for the bandwidth check.
	Link string `json:"link,omitempty"`
}

// Texts returns the findings' texts, in order: the notice's words for each
// check that holds, e.g. ["memory at 92 %", "the connection table was
// full: 37 connections dropped"], as a log line or a dashboard lists them.
// It returns nil for no findings.
func Texts(fs []Finding) []string {
	if len(fs) == 0 {
		return nil
	}
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Text
	}
	return out
}

// Evaluate returns the checks that pass in this one reading, in notice
// order, each with its figures. Zero fields of l mean their defaults. A
// check whose input the reading lists as missing does not pass. Evaluate
// does not validate r (figures that are NaN pass nothing); a [Tracker]
// validates each reading before it evaluates it.
//
// For the bandwidth check, the finding names the link furthest above its
// speed's limit (the first listed on a tie); a link whose speed is unknown
// (0) is left out.
func Evaluate(r Reading, l Limits) []Finding {
	l = l.withDefaults()
	missing := make(map[Input]bool, len(r.Missing))
	for _, in := range r.Missing {
		missing[in] = true
	}
	var out []Finding
	for i := range checkTable {
		d := &checkTable[i]
		if missing[d.input] {
			continue
		}
		if f, ok := d.evaluate(r, l); ok {
			f.At = r.At
			out = append(out, f)
		}
	}
	return out
}

// evaluateBandwidth is the bandwidth check: the link furthest above its
// speed's limit (the first listed on a tie), leaving out links whose speed
// is unknown.
func evaluateBandwidth(r Reading, l Limits) (Finding, bool) {
	var (
		best     Finding
		bestLink Link
		found    bool
	)
	for _, k := range r.Links {
		if k.SpeedMbps == 0 {
			continue
		}
		rate := max(k.RxBitsPerSecond, k.TxBitsPerSecond)
		if math.IsNaN(k.RxBitsPerSecond) || math.IsNaN(k.TxBitsPerSecond) {
			continue
		}
		p := rate * 100 / (float64(k.SpeedMbps) * 1e6)
		if !(p > l.BandwidthPercent) || (found && !(p > best.Value)) {
			continue
		}
		best = Finding{Check: CheckBandwidth, Value: p, Limit: l.BandwidthPercent, Link: k.Name}
		bestLink = k
		found = true
	}
	if !found {
		return Finding{}, false
	}
	best.Text = fmt.Sprintf("bandwidth at %s, %s %% of the %s link %s",
		formatRate(max(bestLink.RxBitsPerSecond, bestLink.TxBitsPerSecond)), formatAbove(best.Value, best.Limit, 0, true),
		formatSpeed(bestLink.SpeedMbps), bestLink.Name)
	return best, true
}

// formatAbove formats a figure that passed a check against limit (strictly
// above it when strict, else at or above it) so that the printed figure
// passes too. The figure is rounded to the nearest, to decimals places (as
// the design's "the connection table at 85 % (222822 of 262144)", which is
// 84.9998 %), and more places are shown, up to decimals+2, while the
// rounded figure would read as not passing: a memory use of 90.4 % against
// "over 90 %" reads "90.4", never "90"; 92.7 reads "93". When no such
// short form exists the shortest exact form is printed.
func formatAbove(v, limit float64, decimals int, strict bool) string {
	passes := func(x float64) bool {
		if strict {
			return x > limit
		}
		return x >= limit
	}
	for d := decimals; d <= decimals+2; d++ {
		scale := math.Pow(10, float64(d))
		t := math.Round(v*scale) / scale
		if passes(t) {
			return strconv.FormatFloat(t, 'f', d, 64)
		}
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// timesWord says "LoadPerCPU times" in words: "twice the", "the",
// "1.5 times the".
func timesWord(f float64) string {
	switch f {
	case 1:
		return "the"
	case 2:
		return "twice the"
	case 3:
		return "three times the"
	}
	return strconv.FormatFloat(f, 'f', -1, 64) + " times the"
}

// cores says "8 CPU cores" or "1 CPU core".
func cores(n int) string {
	if n == 1 {
		return "1 CPU core"
	}
	return strconv.Itoa(n) + " CPU cores"
}

// dropped says "37 connections dropped" or "1 connection dropped".
func dropped(n uint64) string {
	if n == 1 {
		return "1 connection dropped"
	}
	return strconv.FormatUint(n, 10) + " connections dropped"
}

// formatSpeed formats a link speed given in Mbit/s: "100 Mbit/s",
// "1 Gbit/s", "2.5 Gbit/s", "10 Gbit/s".
func formatSpeed(mbps uint64) string {
	if mbps >= 1000 {
		return strconv.FormatFloat(float64(mbps)/1000, 'f', -1, 64) + " Gbit/s"
	}
	return strconv.FormatUint(mbps, 10) + " Mbit/s"
}

// formatRate formats a rate in bit/s, rounded: "870 Mbit/s",
// "8.7 Gbit/s", "950 kbit/s", "12 bit/s".
func formatRate(bps float64) string {
	unit := []struct {
		scale float64
		name  string
		dec   int
	}{{1e9, "Gbit/s", 1}, {1e6, "Mbit/s", 0}, {1e3, "kbit/s", 0}, {1, "bit/s", 0}}
	for _, u := range unit {
		if bps >= u.scale || u.scale == 1 {
			scale := math.Pow(10, float64(u.dec))
			t := math.Round(bps/u.scale*scale) / scale
			s := strconv.FormatFloat(t, 'f', u.dec, 64)
			s = strings.TrimSuffix(s, ".0")
			return s + " " + u.name
		}
	}
	return "" // not reached
}
