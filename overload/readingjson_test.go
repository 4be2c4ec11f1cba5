package overload

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// plainCases are readings in the plain form (decodePlain takes them) and
// inputs it leaves to encoding/json, each with which it is.
var plainCases = []struct {
	in    string
	plain bool
}{
	{wire, true},
	{`{"v":2,"node":"n7","at":"2026-11-30T12:00:00Z","run":"4f1c2a9b","seq":812,"memory_used_percent":61.25,"load15":1.5,"cpus":4,"conntrack_entries":1000,"conntrack_max":262144,"conntrack_drops":0,"listen_drops":0,"missing":["bandwidth"]}`, true},
	{" \t\r\n{ \"v\" : 1 , \"at\" : \"2026-11-30T12:00:00+02:00\" }\n ", true},
	{`{}`, true},
	{`{"links":[],"listeners":[],"missing":[],"notes":[]}`, true},
	{`{"links":[{}],"listeners":[{}]}`, true},
	{`{"links":[{"name":"eth0","rx_bps":-0,"tx_bps":1.5e-3,"speed_mbps":1000}]}`, true},
	{`{"listeners":[{"addr":"[::]:443","queue":4294967295,"backlog":0}]}`, true},
	{`{"missing":["memory","nope"],"notes":["é ok"]}`, true},
	{`{"v":-9223372036854775808,"cpus":9223372036854775807,"seq":18446744073709551615}`, true},
	{`{"v":-0}`, true},
	{`{"load15":1e-400}`, true},

	{`null`, false},
	{`[]`, false},
	{`{`, false},
	{`{"v":1}x`, false},
	{`{"v":1,}`, false},
	{`{"v":1,"v":2}`, false},
	{`{"V":1}`, false},
	{`{"NODE":"x"}`, false},
	{`{"linKs":[]}`, false},
	{"{\"lin\u212as\":[]}", false}, // Kelvin sign: encoding/json folds it to k
	{`{"node":null}`, false},
	{`{"node":"a\"b"}`, false},
	{`{"node":"a\u0062"}`, false},
	{"{\"node\":\"\xff\"}", false},
	{`{"cpus":1.0}`, false},
	{`{"cpus":1e2}`, false},
	{`{"cpus":"4"}`, false},
	{`{"seq":-0}`, false},
	{`{"seq":18446744073709551616}`, false},
	{`{"v":9223372036854775808}`, false},
	{`{"listeners":[{"queue":4294967296}]}`, false},
	{`{"load15":1e400}`, false},
	{`{"load15":01}`, false},
	{`{"load15":.5}`, false},
	{`{"load15":NaN}`, false},
	{`{"at":"2026-11-30T12:00:00"}`, false},
	{`{"at":5}`, false},
	{`{"links":[{"name":"a","name":"b"}]}`, false},
	{`{"links":[null]}`, false},
	{`{"links":{}}`, false},
	{`{"links":[{"name":"eth0","x":{"a":[1,true,false,"s",{}]}}]}`, false},
	{`{"extra":[1,2,{"b":"c"}],"more":-1.5E+3,"":true}`, false},
	{`{"x":null}`, false},
	{`{"x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, false},
}

// TestDecodePlain: decodePlain takes the plain form, and what it takes it
// decodes as encoding/json does.
func TestDecodePlain(t *testing.T) {
	for _, tc := range plainCases {
		var r Reading
		if got := decodePlain([]byte(tc.in), &r); got != tc.plain {
			t.Errorf("decodePlain(%s) = %v, want %v", tc.in, got, tc.plain)
		}
		samePlain(t, []byte(tc.in))
	}
}

// samePlain fails t when decodePlain takes b and encoding/json refuses
// it or decodes it otherwise.
func samePlain(t *testing.T, b []byte) {
	t.Helper()
	var fast, slow Reading
	if !decodePlain(b, &fast) {
		return
	}
	if err := json.Unmarshal(b, (*readingJSON)(&slow)); err != nil {
		t.Fatalf("decodePlain took %q, encoding/json refuses it: %v", b, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q:\ndecodePlain  %#v\nencoding/json %#v", b, fast, slow)
	}
}

// FuzzDecodePlain: whatever decodePlain takes, encoding/json takes too
// and decodes to the same reading; so Reading.UnmarshalJSON, which
// leaves every other input to encoding/json, answers as it did before
// it had decodePlain.
func FuzzDecodePlain(f *testing.F) {
	for _, tc := range plainCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) { samePlain(t, b) })
}

// decodeReference decodes b as UnmarshalJSON does, through encoding/json
// alone, without decodePlain.
func decodeReference(b []byte, r *Reading) error {
	var v readingJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("decode reading: %w: %w", ErrInvalidReading, err)
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

// BenchmarkReadingUnmarshal: decoding a reading, validation included, as
// the platform's report handler does (UnmarshalJSON called directly),
// by UnmarshalJSON (codec=hand: decodePlain) and through encoding/json
// alone (codec=encoding_json: decodeReference), side by side, for
// platformload's reading (no link, no listener) and for an agent's on a
// node with two links and eight listeners (sshd and a proxy on IPv4
// and IPv6, a local resolver's two, two exporters on loopback).
// Compare with benchstat -col /codec.
func BenchmarkReadingUnmarshal(b *testing.B) {
	for _, rd := range []struct {
		name string
		body string
	}{
		{"platformload", `{"v":2,"node":"n7","at":"2026-11-30T12:00:00Z","run":"4f1c2a9be0d34c5e8a6b7c9d0e1f2a3b","seq":812,"memory_used_percent":61.25,"load15":1.5,"cpus":4,"conntrack_entries":1000,"conntrack_max":262144,"conntrack_drops":0,"listen_drops":0,"missing":["bandwidth"]}`},
		{"node", `{"v":2,"node":"eu-01","at":"2026-11-30T12:00:00.417305112Z","run":"4f1c2a9be0d34c5e8a6b7c9d0e1f2a3b","seq":812,"memory_used_percent":61.25,"load15":1.5,"cpus":8,"conntrack_entries":21344,"conntrack_max":262144,"conntrack_drops":0,"listen_drops":0,"listeners":[{"addr":"0.0.0.0:22","queue":0,"backlog":128},{"addr":"[::]:22","queue":0,"backlog":128},{"addr":"127.0.0.53:53","queue":0,"backlog":4096},{"addr":"127.0.0.54:53","queue":0,"backlog":4096},{"addr":"0.0.0.0:443","queue":0,"backlog":4096},{"addr":"[::]:443","queue":0,"backlog":4096},{"addr":"127.0.0.1:9100","queue":0,"backlog":4096},{"addr":"127.0.0.1:9464","queue":0,"backlog":4096}],"links":[{"name":"eth0","rx_bps":81234567.5,"tx_bps":91234567.25,"speed_mbps":10000},{"name":"eth1","rx_bps":1234.5,"tx_bps":2345.5,"speed_mbps":1000}]}`},
	} {
		body := []byte(rd.body)
		for _, hand := range []bool{true, false} {
			codec := "hand"
			if !hand {
				codec = "encoding_json"
			}
			b.Run("reading="+rd.name+"/codec="+codec, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					var r Reading
					var err error
					if hand {
						err = r.UnmarshalJSON(body)
					} else {
						err = decodeReference(body, &r)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
