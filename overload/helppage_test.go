package overload

import (
	"testing"
	"time"
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
	over, ev, notices := trace(t, tr, readings, func(c rune, at time.Time) Reading {
		r := calm(at)
		switch c {
		case 'm':
			r.MemoryUsedPercent = 92
		case 'l':
			r.ListenDrops = 14
		}
		return r
	})
	if over != overloaded || ev != events {
		t.Errorf("readings   %q\noverloaded %q, want %q\nevents     %q, want %q",
			readings, over, overloaded, ev, events)
	}
	if notices != 1 {
		t.Errorf("%d notices, want the one of the start", notices)
	}
	if e := tr.Events(); len(e) != 2 || e[1].Lasted != 7*step {
		t.Errorf("events %+v, want a start and an end that lasted %v", e, 7*step)
	}
}
