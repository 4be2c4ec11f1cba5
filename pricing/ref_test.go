package pricing

import (
	"testing"
	"time"
)

// Reference implementations: the rule as written, computed by brute force,
// for the fast ones to be checked against.

// refAsked returns the price the node asked at u, and false before its
// first price.
func refAsked(h *History, u int64) (Price, bool) {
	p, ok := Price(0), false
	for i, at := range h.at {
		if at <= u {
			p, ok = h.price[i], true
		}
	}
	return p, ok
}

// refHighest returns the highest price asked during [u−w, u], over the part
// of it where the node had a price.
func refHighest(h *History, u int64) Price {
	w := h.win()
	best, ok := refAsked(h, u-w)
	for i, at := range h.at {
		if at > u-w && at <= u && (!ok || h.price[i] > best) {
			best, ok = h.price[i], true
		}
	}
	return best
}

// refSessionPrice is the lowest of locked and refHighest(u) for every u in
// [start, t]. refHighest is a step function that can change only at change
// instants and at change instants plus the window, so those instants in
// (start, t], and start itself, are every value it takes.
func refSessionPrice(h *History, locked Price, start, t int64) Price {
	p := min(locked, refHighest(h, start))
	for _, at := range h.at {
		for _, u := range []int64{at, at + h.win()} {
			if u > start && u <= t {
				p = min(p, refHighest(h, u))
			}
		}
	}
	return p
}

// refSampled is the same rule sampled every step from start to t (both
// included): exact when every change instant, start, t and the window are
// multiples of step.
func refSampled(h *History, locked Price, start, t, step int64) Price {
	p := locked
	for u := start; u <= t; u += step {
		p = min(p, refHighest(h, u))
	}
	return p
}

// TestReferencesOnTheWorkedCase checks the references themselves on the
// worked case of the pricing rules, so a wrong reference cannot make the property tests agree
// with a wrong fast implementation: 100 from 0:00, 80 from 1:00; a session
// locked at 0:00 pays 100 at 3:59 and 80 from 4:00.
func TestReferencesOnTheWorkedCase(t *testing.T) {
	t0 := time.Date(2026, 10, 26, 0, 0, 0, 0, time.UTC)
	var h History
	if err := h.Set(t0, 100); err != nil {
		t.Fatal(err)
	}
	if err := h.Set(t0.Add(time.Hour), 80); err != nil {
		t.Fatal(err)
	}
	start := t0.UnixNano()
	for _, c := range []struct {
		at   time.Duration
		want Price
	}{
		{0, 100},
		{time.Hour, 100},
		{3*time.Hour + 59*time.Minute, 100},
		{4 * time.Hour, 80},
		{10 * time.Hour, 80},
	} {
		at := t0.Add(c.at).UnixNano()
		if got := refSessionPrice(&h, 100, start, at); got != c.want {
			t.Errorf("refSessionPrice at +%v = %d, want %d", c.at, got, c.want)
		}
		if got := refSampled(&h, 100, start, at, int64(time.Minute)); got != c.want {
			t.Errorf("refSampled at +%v = %d, want %d", c.at, got, c.want)
		}
	}
}
