package overload

import (
	"encoding/json"
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
	{`{"links":[{"name":"eth0","rx_bps":-0,"tx_bps":1.5e-3,"speed_mbps":1000,"x":{"a":[1,true,false,"s",{}]}}]}`, true},
	{`{"listeners":[{"addr":"[::]:443","queue":4294967295,"backlog":0}]}`, true},
	{`{"missing":["memory","nope"],"notes":["é ok"]}`, true},
	{`{"extra":[1,2,{"b":"c"}],"more":-1.5E+3,"":true}`, true},
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

// BenchmarkReadingUnmarshal: decoding a reading as an agent sends it,
// validation included.
func BenchmarkReadingUnmarshal(b *testing.B) {
	body := []byte(`{"v":2,"node":"n7","at":"2026-11-30T12:00:00Z","run":"4f1c2a9be0d34c5e8a6b7c9d0e1f2a3b","seq":812,"memory_used_percent":61.25,"load15":1.5,"cpus":4,"conntrack_entries":1000,"conntrack_max":262144,"conntrack_drops":0,"listen_drops":0,"missing":["bandwidth"]}`)
	b.ReportAllocs()
	for b.Loop() {
		var r Reading
		if err := json.Unmarshal(body, &r); err != nil {
			b.Fatal(err)
		}
	}
}
