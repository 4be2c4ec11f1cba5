package overload

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// A platform encodes every node's tracker state on every report.
// encoding/json, which walks a trackerState by reflection, through a map
// of checks it builds first, spends most of that time finding fields and
// allocating; the functions here append the same bytes, field by field,
// into one slice sized beforehand. Their output is encoding/json's to the
// byte, for every state (FuzzTrackerMarshal holds them to it): fields in
// trackerState's order, omitempty and omitzero as its tags say, the
// checks' keys in sorted order, strings escaped as encoding/json escapes
// them, times as time.Time.MarshalJSON writes them and floats as
// encoding/json formats them. What encoding/json refuses (a NaN, a time
// outside years 0 to 9999) is an error here too.
//
// It pays, the more the longer a node's history: the state holds the
// node's events, up to MaxEvents (100), and is encoded whole on every
// report. BenchmarkTrackerMarshalJSON, these functions against
// encoding/json (marshalReference), side by side, medians of 10 runs
// alternated in one session on a shared 2-core machine (6e5cfe1): a calm
// node's state (351 bytes) in 0.8 µs against 5.1 µs, a node's with nine
// events (3.6 KiB) in 10.5 against 43.4 µs, with 100 events (28 KiB) in
// 87 against 322 µs; one allocation against 24, 60 and 332. Against the
// 0.14 ms of CPU a report costs the platform at 100,000 nodes, 3 %, 23 %
// and 170 % saved; about half that on the quiet machine the 0.14 ms was
// measured on, where the busy state took 5.3 µs against 18.8.
//
//	go test -c -o /tmp/o.test ./overload/
//	flock /tmp/bench.lock sh -c 'for i in $(seq 10); do /tmp/o.test -test.run "^$" -test.bench TrackerMarshalJSON -test.benchmem; done' >ab.txt
//	benchstat -col /codec ab.txt

// appendState appends t's state as MarshalJSON encodes it.
func (t *Tracker) appendState(b []byte) ([]byte, error) {
	var err error
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, stateVersion, 10)
	if t.node != "" {
		b = append(b, `,"node":`...)
		b = appendString(b, t.node)
	}
	if !t.last.IsZero() {
		b = append(b, `,"last_reading":`...)
		if b, err = appendTime(b, t.last); err != nil {
			return nil, fmt.Errorf("last_reading: %w", err)
		}
	}
	if t.run != "" {
		b = append(b, `,"last_run":`...)
		b = appendString(b, t.run)
	}
	if t.seq != 0 {
		b = append(b, `,"last_seq":`...)
		b = strconv.AppendUint(b, t.seq, 10)
	}
	for i, m := range t.earlier {
		if i == 0 {
			b = append(b, `,"earlier_runs":[`...)
		} else {
			b = append(b, ',')
		}
		b = append(b, `{"run":`...)
		b = appendString(b, m.run)
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, m.seq, 10)
		b = append(b, '}')
	}
	if len(t.earlier) > 0 {
		b = append(b, ']')
	}
	first := true
	for _, i := range checksInNameOrder {
		st := &t.checks[i]
		if len(st.window) == 0 && st.last == nil {
			continue
		}
		if first {
			b = append(b, `,"checks":{`...)
			first = false
		} else {
			b = append(b, ',')
		}
		b = appendString(b, string(checkTable[i].check))
		b = append(b, `:{"window":"`...)
		for _, p := range st.window {
			if p {
				b = append(b, '1')
			} else {
				b = append(b, '0')
			}
		}
		b = append(b, '"')
		if st.last != nil {
			b = append(b, `,"last":`...)
			if b, err = appendFinding(b, st.last); err != nil {
				return nil, fmt.Errorf("check %s: latest finding: %w", checkTable[i].check, err)
			}
		}
		b = append(b, '}')
	}
	if !first {
		b = append(b, '}')
	}
	if t.Overloaded() {
		b = append(b, `,"overloaded":true`...)
	} else {
		b = append(b, `,"overloaded":false`...)
	}
	if !t.since.IsZero() {
		b = append(b, `,"since":`...)
		if b, err = appendTime(b, t.since); err != nil {
			return nil, fmt.Errorf("since: %w", err)
		}
	}
	if !t.lastNotice.IsZero() {
		b = append(b, `,"last_notice":`...)
		if b, err = appendTime(b, t.lastNotice); err != nil {
			return nil, fmt.Errorf("last_notice: %w", err)
		}
	}
	for i := range t.events {
		if i == 0 {
			b = append(b, `,"events":[`...)
		} else {
			b = append(b, ',')
		}
		if b, err = appendEvent(b, &t.events[i]); err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
	}
	if len(t.events) > 0 {
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// checksInNameOrder is checkTable's indexes ordered by the checks'
// names, as encoding/json orders a map's keys.
var checksInNameOrder = checksByName()

// checksByName returns the indexes of the checks in checkTable ordered by
// name.
func checksByName() [numChecks]int {
	var order [numChecks]int
	for i := range order {
		order[i] = i
		for j := i; j > 0 && checkTable[order[j]].check < checkTable[order[j-1]].check; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	return order
}

// appendEvent appends e as Event.MarshalJSON encodes it.
func appendEvent(b []byte, e *Event) ([]byte, error) {
	var err error
	b = append(b, `{"kind":`...)
	b = appendString(b, string(e.Kind))
	b = append(b, `,"at":`...)
	if b, err = appendTime(b, e.At); err != nil {
		return nil, fmt.Errorf("at: %w", err)
	}
	for i := range e.Findings {
		if i == 0 {
			b = append(b, `,"findings":[`...)
		} else {
			b = append(b, ',')
		}
		if b, err = appendFinding(b, &e.Findings[i]); err != nil {
			return nil, fmt.Errorf("finding %d: %w", i, err)
		}
	}
	if len(e.Findings) > 0 {
		b = append(b, ']')
	}
	if e.Lasted != 0 {
		// A duration's string needs no escaping: digits, a sign, a
		// point and units, "µs" the only one beyond ASCII.
		b = append(b, `,"lasted":"`...)
		b = append(b, e.Lasted.String()...)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

// appendFinding appends f as encoding/json encodes a Finding.
func appendFinding(b []byte, f *Finding) ([]byte, error) {
	var err error
	b = append(b, `{"check":`...)
	b = appendString(b, string(f.Check))
	b = append(b, `,"text":`...)
	b = appendString(b, f.Text)
	b = append(b, `,"at":`...)
	if b, err = appendTime(b, f.At); err != nil {
		return nil, fmt.Errorf("at: %w", err)
	}
	b = append(b, `,"value":`...)
	if b, err = appendFloat(b, f.Value); err != nil {
		return nil, fmt.Errorf("value: %w", err)
	}
	b = append(b, `,"limit":`...)
	if b, err = appendFloat(b, f.Limit); err != nil {
		return nil, fmt.Errorf("limit: %w", err)
	}
	if f.Link != "" {
		b = append(b, `,"link":`...)
		b = appendString(b, f.Link)
	}
	return append(b, '}'), nil
}

// appendTime appends t as time.Time.MarshalJSON encodes it, RFC 3339 with
// nanoseconds, quoted; like it, it refuses a time that RFC 3339 cannot
// write (a year outside 0 to 9999, a zone 24 hours or more off UTC).
func appendTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return nil, err
	}
	return append(b, '"'), nil
}

// appendFloat appends f as encoding/json encodes a float64: the shortest
// form that reads back as f, in exponent form only for magnitudes below
// 1e-6 or from 1e21 on, with a negative exponent's leading zero dropped
// (1e-7, not 1e-07). NaN and infinities are errors, as in encoding/json.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, errors.New("unsupported value: " + strconv.FormatFloat(f, 'g', -1, 64))
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 && !(f == 0 && math.Signbit(f)) {
		// An integer (a count, a limit such as 80) is its digits; -0 is
		// left to AppendFloat, which writes its sign.
		return strconv.AppendInt(b, int64(f), 10), nil
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// appendString appends s quoted as encoding/json writes a string, with
// HTML escaping: '"' and '\\' escaped, control characters as \n, \t and
// the like or \u00XX, '<', '>' and '&' as \u003c, \u003e and \u0026,
// U+2028 and U+2029 as \u2028 and \u2029, and each byte that is not
// UTF-8 as \ufffd.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Bounds on the encoded length of a state's parts, for stateSize. A
// string counts as its length and quotes: escaping lengthens it, and
// then append grows the slice.
const (
	maxTimeLen     = len(`"` + time.RFC3339Nano + `"`)
	maxFloatLen    = len("-0.0000012345678901234567") // 17 digits at 1e-6, the longest 'f' form
	maxUintLen     = len("18446744073709551615")
	maxDurationLen = len("-2562047h47m16.854775808s")
	// findingLen is a finding's length less its strings': its names and
	// punctuation, quotes included, a time and two floats.
	findingLen = len(`{"check":"","text":"","at":,"value":,"limit":,"link":""}`) + maxTimeLen + 2*maxFloatLen
	// eventLen is an event's length less its findings' and its kind's,
	// and the comma before the next.
	eventLen = len(`{"kind":"","at":,"findings":[],"lasted":""},`) + maxTimeLen + maxDurationLen
	// stateLen is a state's length less its node's and runs', its
	// checks' and its events'.
	stateLen = len(`{"v":,"node":"","last_reading":,"last_run":"","last_seq":,"earlier_runs":[],"checks":{},"overloaded":false,"since":,"last_notice":,"events":[]}`) +
		3*maxTimeLen + 2*maxUintLen
	// runLen is an earlier run's length less its name's, with the comma
	// before the next.
	runLen = len(`{"run":"","seq":},`) + maxUintLen
	// checkLen is a check's length less its name's, its window's and its
	// latest finding's, with the comma before the next.
	checkLen = len(`"":{"window":"","last":},`)
)

// stateSize returns the length of t's encoded state or more, when no
// string in it needs escaping: every field counts, and every time and
// float at its longest.
func (t *Tracker) stateSize() int {
	n := stateLen + len(t.node) + len(t.run)
	for _, m := range t.earlier {
		n += runLen + len(m.run)
	}
	for i := range t.checks {
		st := &t.checks[i]
		n += checkLen + len(checkTable[i].check) + len(st.window)
		if st.last != nil {
			n += findingSize(st.last)
		}
	}
	for i := range t.events {
		n += eventSize(&t.events[i])
	}
	return n
}

// eventSize returns the length of e encoded, or more, and a comma.
func eventSize(e *Event) int {
	n := eventLen + len(e.Kind)
	for i := range e.Findings {
		n += findingSize(&e.Findings[i]) + len(",")
	}
	return n
}

// findingSize returns the length of f encoded, or more.
func findingSize(f *Finding) int {
	return findingLen + len(f.Check) + len(f.Text) + len(f.Link)
}
