package overload

import (
	"strings"
	"testing"
)

// "A node becomes overloaded when any check passed in at least 3 of its
// last 5 readings, and stays overloaded until no check does": when the
// check that started an overload lets go while another holds, the
// overload goes on (no end, no second start, no notice); it ends only
// when the last check lets go.
func TestSeedStaysOverloadedUntilNoCheckHolds(t *testing.T) {
	// m: memory passes, l: listen queues drop 14, .: calm. Memory
	// holds from the 3rd reading to the 5th, listen queues from the 6th
	// to the 9th: one overload, from the 3rd to the 10th.
	const (
		readings   = "mmmllll...."
		overloaded = "--OOOOOOO--"
		events     = "  S      E "
	)
	tr := NewTracker("eu-01", Limits{})
	at := t0
	var over, ev strings.Builder
	notices := 0
	for _, c := range readings {
		at = at.Add(step)
		r := calm(at)
		if c == 'm' {
			r.MemoryUsedPercent = 92
		}
		if c == 'l' {
			r.ListenDrops = 14
		}
		res := observe(t, tr, r)
		over.WriteByte("-O"[b2i(res.Overloaded)])
		switch {
		case res.Event == nil:
			ev.WriteByte(' ')
		case res.Event.Kind == Start:
			ev.WriteByte('S')
		default:
			ev.WriteByte('E')
		}
		if res.Notice != nil {
			notices++
		}
	}
	if over.String() != overloaded || ev.String() != events {
		t.Errorf("readings   %q\noverloaded %q, want %q\nevents     %q, want %q",
			readings, over.String(), overloaded, ev.String(), events)
	}
	if notices != 1 {
		t.Errorf("%d notices, want the one of the start", notices)
	}
	if e := tr.Events(); len(e) != 2 || e[1].Lasted != 7*step {
		t.Errorf("events %+v, want a start and an end that lasted %v", e, 7*step)
	}
}
