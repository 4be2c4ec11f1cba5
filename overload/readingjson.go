package overload

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decodePlain decodes b into r, which must be the zero Reading, when b is
// a reading in the plain form agents send, and reports whether it did.
// The plain form is one JSON object, each field at most once and named
// exactly by its wire name; strings without escapes and in valid UTF-8;
// numbers that fit their fields; no null; unknown fields of any value
// beside (their names not a wire name in another case). A platform takes
// a reading a node every 30 s, and encoding/json, which finds each field
// by reflection after a first pass over the bytes to check them, costs
// several times more.
//
// On every input it takes, decodePlain gives what encoding/json gives;
// on every other it returns false, leaving r in no particular state,
// and the caller decodes b with encoding/json, whose answer (and error)
// then stands. So it refuses no input encoding/json takes, and changes no
// error: FuzzDecodePlain holds it to that.
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

// wireNames are the names of the fields of a reading, a link and a
// listener. encoding/json matches a name in another case too, so an
// unknown field whose name is one of these in another case is left to it.
var wireNames = []string{
	"v", "node", "at", "run", "seq", "memory_used_percent", "load15", "cpus",
	"conntrack_entries", "conntrack_max", "conntrack_drops", "listen_drops",
	"listeners", "links", "missing", "notes",
	"name", "rx_bps", "tx_bps", "speed_mbps",
	"addr", "queue", "backlog",
}

func (d *plainDecoder) object(r *Reading) bool {
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
		var bit uint32
		switch string(key) {
		case "v":
			bit = fVersion
			var n int64
			n, ok = d.int(math.MinInt, math.MaxInt)
			r.Version = int(n)
		case "node":
			bit = fNode
			r.Node, ok = d.string()
		case "at":
			bit = fAt
			d.space()
			at := d.i
			if _, ok = d.str(); ok {
				ok = r.At.UnmarshalJSON(d.b[at:d.i]) == nil
			}
		case "run":
			bit = fRun
			r.Run, ok = d.string()
		case "seq":
			bit = fSeq
			r.Seq, ok = d.uint(math.MaxUint64)
		case "memory_used_percent":
			bit = fMemory
			r.MemoryUsedPercent, ok = d.float()
		case "load15":
			bit = fLoad15
			r.Load15, ok = d.float()
		case "cpus":
			bit = fCPUs
			var n int64
			n, ok = d.int(math.MinInt, math.MaxInt)
			r.CPUs = int(n)
		case "conntrack_entries":
			bit = fEntries
			r.ConntrackEntries, ok = d.uint(math.MaxUint64)
		case "conntrack_max":
			bit = fMax
			r.ConntrackMax, ok = d.uint(math.MaxUint64)
		case "conntrack_drops":
			bit = fCtDrops
			r.ConntrackDrops, ok = d.uint(math.MaxUint64)
		case "listen_drops":
			bit = fListenDrops
			r.ListenDrops, ok = d.uint(math.MaxUint64)
		case "listeners":
			bit = fListeners
			r.Listeners, ok = d.listeners()
		case "links":
			bit = fLinks
			r.Links, ok = d.links()
		case "missing":
			bit = fMissing
			r.Missing, ok = d.inputs()
		case "notes":
			bit = fNotes
			r.Notes, ok = d.strings()
		default:
			ok = d.unknown(key)
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if !d.eat(',') {
			return d.eat('}')
		}
	}
}

func (d *plainDecoder) links() ([]Link, bool) {
	if !d.eat('[') {
		return nil, false
	}
	links := []Link{}
	if d.eat(']') {
		return links, true
	}
	for {
		var k Link
		if !d.eat('{') {
			return nil, false
		}
		if !d.eat('}') {
			var seen uint32
			for {
				key, ok := d.key()
				if !ok {
					return nil, false
				}
				var bit uint32
				switch string(key) {
				case "name":
					bit = 1
					k.Name, ok = d.string()
				case "rx_bps":
					bit = 2
					k.RxBitsPerSecond, ok = d.float()
				case "tx_bps":
					bit = 4
					k.TxBitsPerSecond, ok = d.float()
				case "speed_mbps":
					bit = 8
					k.SpeedMbps, ok = d.uint(math.MaxUint64)
				default:
					ok = d.unknown(key)
				}
				if !ok || seen&bit != 0 {
					return nil, false
				}
				seen |= bit
				if !d.eat(',') {
					if !d.eat('}') {
						return nil, false
					}
					break
				}
			}
		}
		links = append(links, k)
		if !d.eat(',') {
			return links, d.eat(']')
		}
	}
}

func (d *plainDecoder) listeners() ([]Listener, bool) {
	if !d.eat('[') {
		return nil, false
	}
	ls := []Listener{}
	if d.eat(']') {
		return ls, true
	}
	for {
		var l Listener
		if !d.eat('{') {
			return nil, false
		}
		if !d.eat('}') {
			var seen uint32
			for {
				key, ok := d.key()
				if !ok {
					return nil, false
				}
				var bit uint32
				var n uint64
				switch string(key) {
				case "addr":
					bit = 1
					l.Addr, ok = d.string()
				case "queue":
					bit = 2
					n, ok = d.uint(math.MaxUint32)
					l.Queue = uint32(n)
				case "backlog":
					bit = 4
					n, ok = d.uint(math.MaxUint32)
					l.Backlog = uint32(n)
				default:
					ok = d.unknown(key)
				}
				if !ok || seen&bit != 0 {
					return nil, false
				}
				seen |= bit
				if !d.eat(',') {
					if !d.eat('}') {
						return nil, false
					}
					break
				}
			}
		}
		ls = append(ls, l)
		if !d.eat(',') {
			return ls, d.eat(']')
		}
	}
}

// inputs reads Missing; a known input is its constant, so reading one
// allocates nothing.
func (d *plainDecoder) inputs() ([]Input, bool) {
	if !d.eat('[') {
		return nil, false
	}
	ins := []Input{}
	if d.eat(']') {
		return ins, true
	}
	for {
		s, ok := d.str()
		if !ok {
			return nil, false
		}
		in := Input("")
		for _, known := range knownInputs {
			if string(s) == string(known) {
				in = known
				break
			}
		}
		if in == "" {
			in = Input(s)
		}
		ins = append(ins, in)
		if !d.eat(',') {
			return ins, d.eat(']')
		}
	}
}

// knownInputs are the inputs a reading may list as missing.
var knownInputs = [...]Input{InputMemory, InputLoad, InputConntrack, InputConntrackDrops, InputListenDrops, InputBandwidth}

func (d *plainDecoder) strings() ([]string, bool) {
	if !d.eat('[') {
		return nil, false
	}
	ss := []string{}
	if d.eat(']') {
		return ss, true
	}
	for {
		s, ok := d.string()
		if !ok {
			return nil, false
		}
		ss = append(ss, s)
		if !d.eat(',') {
			return ss, d.eat(']')
		}
	}
}

// unknown skips the value of a field not in the wire format, named key;
// it refuses a name that encoding/json would match to a field in another
// case, or fold first.
func (d *plainDecoder) unknown(key []byte) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	for _, name := range wireNames {
		if strings.EqualFold(string(key), name) {
			return false
		}
	}
	return d.skip(0)
}

// maxSkipDepth bounds the nesting of an unknown field's value the
// decoder skips; deeper ones are left to encoding/json.
const maxSkipDepth = 32

// skip passes over one JSON value.
func (d *plainDecoder) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	d.space()
	if d.i >= len(d.b) {
		return false
	}
	switch c := d.b[d.i]; {
	case c == '"':
		_, ok := d.str()
		return ok
	case c == '{':
		d.i++
		if d.eat('}') {
			return true
		}
		for {
			if _, ok := d.str(); !ok || !d.eat(':') || !d.skip(depth+1) {
				return false
			}
			if !d.eat(',') {
				return d.eat('}')
			}
		}
	case c == '[':
		d.i++
		if d.eat(']') {
			return true
		}
		for {
			if !d.skip(depth + 1) {
				return false
			}
			if !d.eat(',') {
				return d.eat(']')
			}
		}
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	default:
		// null too is left to encoding/json: here it would be skipped
		// alike, but it is not worth a case.
		_, ok := d.number()
		return ok
	}
}

func (d *plainDecoder) literal(s string) bool {
	if !bytes.HasPrefix(d.b[d.i:], []byte(s)) {
		return false
	}
	d.i += len(s)
	return true
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
