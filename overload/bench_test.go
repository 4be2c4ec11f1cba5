package overload

import (
	"encoding/json"
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
