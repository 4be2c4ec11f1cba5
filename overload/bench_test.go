package overload

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// BenchmarkObserve: one reading into a tracker whose node goes in and out
// of overload (a start or an end every few readings, notices held back by
// the hour), as a platform does for each node every 30 s.
func BenchmarkObserve(b *testing.B) {
	tr := NewTracker("eu-01", Limits{})
	pattern := "xxx..x.xx...."
	rs := make([]Reading, len(pattern))
	for i, c := range pattern {
		rs[i] = calm(t0)
		if c == 'x' {
			rs[i] = hot(t0)
			rs[i].ConntrackDrops = 37
		}
	}
	at := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := rs[i%len(rs)]
		at = at.Add(step)
		r.At = at
		if _, err := tr.Observe(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStateRoundTrip: marshal and restore a tracker with a full event
// list (100 events), as an agent does to persist its state; reports the
// state's size.
func BenchmarkStateRoundTrip(b *testing.B) {
	tr := NewTracker("eu-01", Limits{NoticeEvery: time.Nanosecond})
	at := t0
	for range 60 {
		for _, c := range "xxx..." {
			r := calm(at)
			if c == 'x' {
				r = hot(at)
				r.ConntrackDrops = 37
			}
			if _, err := tr.Observe(r); err != nil {
				b.Fatal(err)
			}
			at = at.Add(step)
		}
	}
	if n := len(tr.Events()); n != 100 {
		b.Fatalf("%d events, want 100", n)
	}
	state, err := json.Marshal(tr)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s, err := json.Marshal(tr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := RestoreTracker(s, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(state)), "state-bytes")
}

// busyTracker returns the tracker of a node that has been through
// overloads, as a platform keeps one: version 2 readings of its third
// run (two earlier ones remembered), memory, conntrack drops and
// bandwidth passing in turn, overloads count times started and ended
// (findings in every start), overloaded again now, and its windows full.
func busyTracker(tb testing.TB, overloads int) *Tracker {
	tr := NewTracker("eu-01", Limits{NoticeEvery: 10 * time.Minute})
	at := t0.Add(417305112) // an agent's readings are dated to the nanosecond
	var seq uint64
	run := ""
	for i := range overloads + 1 {
		pattern := "xxx...."
		if i == overloads {
			pattern = "xx.x"
		}
		if i%max(1, overloads/2) == 0 { // a new run: the agent lost its state
			run, seq = fmt.Sprintf("%032x", i+1), 0
		}
		for _, c := range pattern {
			r := calm(at)
			if c == 'x' {
				r.MemoryUsedPercent = 92.7
				r.ConntrackDrops = uint64(30 + i)
				r.Links[0].TxBitsPerSecond = 8.53e8
			}
			seq++
			r.Version, r.Run, r.Seq = ReadingVersion, run, seq
			if _, err := tr.Observe(r); err != nil {
				tb.Fatal(err)
			}
			at = at.Add(step)
		}
	}
	return tr
}

// calmTracker returns the tracker of a node no check has passed on, as
// most of a fleet's are: version 2 readings of one run, its windows full,
// no finding and no event.
func calmTracker(tb testing.TB) *Tracker {
	tr := NewTracker("eu-01", Limits{})
	at := t0.Add(417305112)
	for i := range 8 {
		r := calm(at)
		r.Version, r.Run, r.Seq = ReadingVersion, "4f1c2a9be0d34c5e8a6b7c9d0e1f2a3b", uint64(i+1)
		if _, err := tr.Observe(r); err != nil {
			tb.Fatal(err)
		}
		at = at.Add(step)
	}
	return tr
}

// benchTracker is a tracker state the benchmarks encode and decode.
type benchTracker struct {
	name string
	tr   *Tracker
}

// benchTrackers are a calm node's tracker (calmTracker), a node's that
// has been through four overloads (busyTracker) and one whose event list
// is full (100 events, the default MaxEvents).
func benchTrackers(tb testing.TB) []benchTracker {
	return []benchTracker{{"calm", calmTracker(tb)}, {"busy", busyTracker(tb, 4)}, {"events100", busyTracker(tb, 50)}}
}

// BenchmarkTrackerMarshalJSON: encoding a node's tracker state, as a
// platform does on every report of every node, by MarshalJSON
// (codec=hand) and through encoding/json as MarshalJSON did before it
// was written by hand (codec=encoding_json, marshalReference), side by
// side, for the states of benchTrackers. Compare with
// benchstat -col /codec.
func BenchmarkTrackerMarshalJSON(b *testing.B) {
	for _, st := range benchTrackers(b) {
		state, err := st.tr.MarshalJSON()
		if err != nil {
			b.Fatal(err)
		}
		for _, codec := range []struct {
			name    string
			marshal func(*Tracker) ([]byte, error)
		}{{"hand", (*Tracker).MarshalJSON}, {"encoding_json", marshalReference}} {
			b.Run("state="+st.name+"/codec="+codec.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := codec.marshal(st.tr); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(state)), "state-bytes")
			})
		}
	}
}

// BenchmarkTrackerUnmarshalJSON: restoring the states of
// BenchmarkTrackerMarshalJSON, through encoding/json, as a platform does
// when it loads a node.
func BenchmarkTrackerUnmarshalJSON(b *testing.B) {
	for _, st := range benchTrackers(b) {
		state, err := st.tr.MarshalJSON()
		if err != nil {
			b.Fatal(err)
		}
		b.Run("state="+st.name+"/codec=encoding_json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := RestoreTracker(state, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
