//go:build goexperiment.jsonv2

package overload

// encoding/json/v2 beside the codecs of BenchmarkReadingUnmarshal,
// BenchmarkTrackerMarshalJSON and BenchmarkTrackerUnmarshalJSON, for
// reference: in Go 1.26 it builds only with GOEXPERIMENT=jsonv2, which a
// library cannot ask of the programs that import it, so overload does
// not use it. Its defaults differ from encoding/json's (names matched
// in their case only, a field given twice refused, omitempty not
// leaving out zero numbers), so its encoding is a few bytes longer.
//
//	GOEXPERIMENT=jsonv2 go test -run '^$' -bench V2 -benchmem ./overload/

import (
	"encoding/json/jsontext"
	jsonv2 "encoding/json/v2"
	"testing"
)

// v2Readings are BenchmarkReadingUnmarshal's readings.
var v2Readings = []struct{ name, body string }{
	{"platformload", `{"v":2,"node":"n7","at":"2026-11-30T12:00:00Z","run":"4f1c2a9be0d34c5e8a6b7c9d0e1f2a3b","seq":812,"memory_used_percent":61.25,"load15":1.5,"cpus":4,"conntrack_entries":1000,"conntrack_max":262144,"conntrack_drops":0,"listen_drops":0,"missing":["bandwidth"]}`},
	{"node", `{"v":2,"node":"eu-01","at":"2026-11-30T12:00:00.417305112Z","run":"4f1c2a9be0d34c5e8a6b7c9d0e1f2a3b","seq":812,"memory_used_percent":61.25,"load15":1.5,"cpus":8,"conntrack_entries":21344,"conntrack_max":262144,"conntrack_drops":0,"listen_drops":0,"listeners":[{"addr":"0.0.0.0:22","queue":0,"backlog":128},{"addr":"[::]:22","queue":0,"backlog":128},{"addr":"127.0.0.53:53","queue":0,"backlog":4096},{"addr":"127.0.0.54:53","queue":0,"backlog":4096},{"addr":"0.0.0.0:443","queue":0,"backlog":4096},{"addr":"[::]:443","queue":0,"backlog":4096},{"addr":"127.0.0.1:9100","queue":0,"backlog":4096},{"addr":"127.0.0.1:9464","queue":0,"backlog":4096}],"links":[{"name":"eth0","rx_bps":81234567.5,"tx_bps":91234567.25,"speed_mbps":10000},{"name":"eth1","rx_bps":1234.5,"tx_bps":2345.5,"speed_mbps":1000}]}`},
}

func BenchmarkV2ReadingUnmarshal(b *testing.B) {
	for _, rd := range v2Readings {
		body := []byte(rd.body)
		b.Run("reading="+rd.name+"/codec=json_v2", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var v readingJSON
				if err := jsonv2.Unmarshal(body, &v); err != nil {
					b.Fatal(err)
				}
				if err := Reading(v).Validate(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkV2TrackerMarshalJSON(b *testing.B) {
	for _, st := range benchTrackers(b) {
		b.Run("state="+st.name+"/codec=json_v2", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := jsonv2.Marshal(referenceState(st.tr), jsonv2.Deterministic(true), jsontext.EscapeForHTML(true)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkV2TrackerUnmarshalJSON(b *testing.B) {
	for _, st := range benchTrackers(b) {
		state, _ := st.tr.MarshalJSON()
		b.Run("state="+st.name+"/codec=json_v2", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var s trackerState
				if err := jsonv2.Unmarshal(state, &s); err != nil {
					b.Fatal(err)
				}
				if _, err := s.tracker(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
