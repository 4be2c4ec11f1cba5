package overload

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// decodePlain decodes b into r, which must be the zero Reading, when b is
// a reading in the plain form agents send, and reports whether it did.
// The plain form is one JSON object of the wire format's fields only,
// each at most once and named exactly by its wire name; strings without
// escapes and in valid UTF-8; numbers that fit their fields; no null.
//
// On every input it takes, decodePlain gives what encoding/json gives;
// on every other (an unknown field included) it returns false, leaving r
// in no particular state, and the caller decodes b with encoding/json,
// whose answer (and error) then stands. So it refuses no input
// encoding/json takes, and changes no error: FuzzDecodePlain holds it to
// that.
//
// It pays: a platform decodes a reading of every node every 30 s, and
// encoding/json, which finds each field by reflection after a first pass
// over the bytes, takes five times as long. BenchmarkReadingUnmarshal,
// validation included, the two side by side, medians of 10 runs
// alternated in one session on a shared 2-core machine (6e5cfe1): an
// agent's reading of a node with two links and eight listeners (797
// bytes) in 5.0 µs against 25.0 µs through encoding/json, 20 µs saved,
// 14 % of the 0.14 ms of CPU a report costs the platform at 100,000
// nodes; platformload's reading, with neither (257 bytes), 1.5 against
// 8.2 µs, 5 %. The machine was busier than when the 0.14 ms was
// measured (the encoding of BenchmarkTrackerMarshalJSON's busy state
// took twice as long as it did then), so on a quiet one the shares are
// about half: 7 % and 2 %.
//
//	go test -c -o /tmp/o.test ./overload/
//	flock /tmp/bench.lock sh -c 'for i in $(seq 10); do /tmp/o.test -test.run "^$" -test.bench ReadingUnmarshal -test.benchmem; done' >ab.txt
//	benchstat -col /codec ab.txt
func decodePlain(b []byte, r *Reading) bool {
	d := plainDecoder{b: b}
	if !d.object(r) {
		return false
	}
	d.space()
	return d.i == len(d.b)
}

// plainDecoder reads JSON from b, at i.
type plainDecoder struct {
	b []byte
	i int
}

// The fields of a reading, a link and a listener, as bits, to find one
// given twice.
const (
	fVersion = 1 << iota
	fNode
	fAt
	fRun
	fSeq
	fMemory
	fLoad15
	fCPUs
	fEntries
	fMax
	fCtDrops
	fListenDrops
	fListeners
	fLinks
	fMissing
	fNotes
)

func (d *plainDecoder) object(r *Reading) bool {
	return d.fields(func(key []byte) (bit uint32, ok bool) {
		switch string(key) {
		case "v":
			var n int64
			n, ok = d.int(math.MinInt, math.MaxInt)
			r.Version = int(n)
			return fVersion, ok
		case "node":
			r.Node, ok = d.string()
			return fNode, ok
		case "at":
			d.space()
			at := d.i
			if _, ok = d.str(); ok {
				ok = r.At.UnmarshalJSON(d.b[at:d.i]) == nil
			}
			return fAt, ok
		case "run":
			r.Run, ok = d.string()
			return fRun, ok
		case "seq":
			r.Seq, ok = d.uint(math.MaxUint64)
			return fSeq, ok
		case "memory_used_percent":
			r.MemoryUsedPercent, ok = d.float()
			return fMemory, ok
		case "load15":
			r.Load15, ok = d.float()
			return fLoad15, ok
		case "cpus":
			var n int64
			n, ok = d.int(math.MinInt, math.MaxInt)
			r.CPUs = int(n)
			return fCPUs, ok
		case "conntrack_entries":
			r.ConntrackEntries, ok = d.uint(math.MaxUint64)
			return fEntries, ok
		case "conntrack_max":
			r.ConntrackMax, ok = d.uint(math.MaxUint64)
			return fMax, ok
		case "conntrack_drops":
			r.ConntrackDrops, ok = d.uint(math.MaxUint64)
			return fCtDrops, ok
		case "listen_drops":
			r.ListenDrops, ok = d.uint(math.MaxUint64)
			return fListenDrops, ok
		case "listeners":
			r.Listeners, ok = d.listeners()
			return fListeners, ok
		case "links":
			r.Links, ok = d.links()
			return fLinks, ok
		case "missing":
			r.Missing, ok = d.inputs()
			return fMissing, ok
		case "notes":
			r.Notes, ok = d.strings()
			return fNotes, ok
		}
		return 0, false
	})
}

// fields reads an object, '{' to '}'. For each field, field is given its
// name, reads its value, and returns the field's bit and whether the value
// was read (not, for a name that is not a field's). A field given twice
// fails, as a value not read does.
func (d *plainDecoder) fields(field func(key []byte) (bit uint32, ok bool)) bool {
	if !d.eat('{') {
		return false
	}
	if d.eat('}') {
		return true
	}
	var seen uint32
	for {
		key, ok := d.key()
		if !ok {
			return false
		}
		bit, ok := field(key)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if !d.eat(',') {
			return d.eat('}')
		}
	}
}

// array reads an array, '[' to ']', calling elem to read each element.
func (d *plainDecoder) array(elem func() bool) bool {
	if !d.eat('[') {
		return false
	}
	if d.eat(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if !d.eat(',') {
			return d.eat(']')
		}
	}
}

// list reads an array into a slice, empty but not nil when the array is
// (as encoding/json gives), each element by elem; nil and false if it
// fails.
func list[T any](d *plainDecoder, elem func() (T, bool)) ([]T, bool) {
	out := []T{}
	if !d.array(func() bool {
		v, ok := elem()
		out = append(out, v)
		return ok
	}) {
		return nil, false
	}
	return out, true
}

func (d *plainDecoder) links() ([]Link, bool) {
	return list(d, func() (k Link, ok bool) {
		ok = d.fields(func(key []byte) (bit uint32, ok bool) {
			switch string(key) {
			case "name":
				k.Name, ok = d.string()
				return 1, ok
			case "rx_bps":
				k.RxBitsPerSecond, ok = d.float()
				return 2, ok
			case "tx_bps":
				k.TxBitsPerSecond, ok = d.float()
				return 4, ok
			case "speed_mbps":
				k.SpeedMbps, ok = d.uint(math.MaxUint64)
				return 8, ok
			}
			return 0, false
		})
		return k, ok
	})
}

func (d *plainDecoder) listeners() ([]Listener, bool) {
	return list(d, func() (l Listener, ok bool) {
		ok = d.fields(func(key []byte) (bit uint32, ok bool) {
			var n uint64
			switch string(key) {
			case "addr":
				l.Addr, ok = d.string()
				return 1, ok
			case "queue":
				n, ok = d.uint(math.MaxUint32)
				l.Queue = uint32(n)
				return 2, ok
			case "backlog":
				n, ok = d.uint(math.MaxUint32)
				l.Backlog = uint32(n)
				return 4, ok
			}
			return 0, false
		})
		return l, ok
	})
}

// inputs reads Missing; a known input is its constant, so reading one
// allocates nothing.
func (d *plainDecoder) inputs() ([]Input, bool) {
	return list(d, func() (Input, bool) {
		s, ok := d.str()
		if !ok {
			return "", false
		}
		for _, known := range knownInputs {
			if string(s) == string(known) {
				return known, true
			}
		}
		return Input(s), true
	})
}

// knownInputs are the inputs a reading may list as missing.
var knownInputs = [...]Input{InputMemory, InputLoad, InputConntrack, InputConntrackDrops, InputListenDrops, InputBandwidth}

func (d *plainDecoder) strings() ([]string, bool) {
	return list(d, d.string)
}

// space passes over JSON's white space.
func (d *plainDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// eat passes over c, after white space, and reports whether it was
// there.
func (d *plainDecoder) eat(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// key reads a field's name and the colon after it.
func (d *plainDecoder) key() ([]byte, bool) {
	k, ok := d.str()
	if !ok || !d.eat(':') {
		return nil, false
	}
	return k, true
}

// str reads a string without escapes or control characters, in valid
// UTF-8 (encoding/json would unescape it, or put U+FFFD for bytes that
// are not UTF-8), and returns its bytes, in b.
func (d *plainDecoder) str() ([]byte, bool) {
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	start := d.i + 1
	ascii := true
	for j := start; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			s := d.b[start:j]
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			d.i = j + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

func (d *plainDecoder) string() (string, bool) {
	s, ok := d.str()
	return string(s), ok
}

// number reads a number by JSON's grammar and returns its bytes.
func (d *plainDecoder) number() ([]byte, bool) {
	d.space()
	b, j := d.b, d.i
	digits := func() bool {
		k := j
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
		return j > k
	}
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case !digits():
		return nil, false
	}
	if j < len(b) && b[j] == '.' {
		j++
		if !digits() {
			return nil, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if !digits() {
			return nil, false
		}
	}
	n := b[d.i:j]
	d.i = j
	return n, true
}

// uint reads a number that is an integer from 0 to most, as
// encoding/json takes one for an unsigned field.
func (d *plainDecoder) uint(most uint64) (uint64, bool) {
	s, ok := d.number()
	if !ok {
		return 0, false
	}
	return parseUint(s, most)
}

// int reads a number that is an integer from least to most, as
// encoding/json takes one for a signed field ("-0" included).
func (d *plainDecoder) int(least, most int64) (int64, bool) {
	s, ok := d.number()
	if !ok {
		return 0, false
	}
	if len(s) > 0 && s[0] == '-' {
		n, ok := parseUint(s[1:], uint64(-(least+1))+1)
		return -int64(n), ok
	}
	n, ok := parseUint(s, uint64(most))
	return int64(n), ok
}

// parseUint parses decimal digits, at most most.
func parseUint(s []byte, most uint64) (uint64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		digit := uint64(c - '0')
		if n > (most-digit)/10 {
			return 0, false
		}
		n = n*10 + digit
	}
	return n, true
}

// float reads a number, as encoding/json takes one for a float64 field.
func (d *plainDecoder) float() (float64, bool) {
	s, ok := d.number()
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(s), 64)
	return f, err == nil
}
