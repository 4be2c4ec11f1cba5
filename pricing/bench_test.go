package pricing

import (
	"fmt"
	"testing"
	"time"
)

// benchHistory builds a history of n changes a minute apart whose prices
// wander, and a session that started at its first change.
func benchHistory(b *testing.B, n int) (*History, Session) {
	h := new(History)
	for i := range n {
		p := Price(1000 + (i*7919)%500 - i/100) // drifts down, with noise
		if err := h.Set(t0.Add(time.Duration(i)*time.Minute), max(p, 0)); err != nil {
			b.Fatal(err)
		}
	}
	s, err := h.Lock(t0)
	if err != nil {
		b.Fatal(err)
	}
	return h, s
}

// The session price at an instant, on histories of 1k, 10k and 100k
// changes: the cost grows with log n.
func BenchmarkSessionPrice(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("changes=%d", n), func(b *testing.B) {
			h, s := benchHistory(b, n)
			span := int64(n) * int64(time.Minute)
			var at [1024]time.Time
			for i := range at {
				at[i] = t0.Add(time.Duration(int64(i) * 7919 * int64(time.Minute) % span))
			}
			for i := 0; b.Loop(); i++ {
				if _, err := h.SessionPrice(s, at[i%len(at)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The reference (brute force) on 1k changes, for scale.
func BenchmarkSessionPriceReference(b *testing.B) {
	h, s := benchHistory(b, 1_000)
	at := t0.Add(900 * time.Minute).UnixNano()
	for b.Loop() {
		refSessionPrice(h, s.Locked, s.Start.UnixNano(), at)
	}
}

// Recording a change, amortised.
func BenchmarkSet(b *testing.B) {
	h := new(History)
	i := 0
	for b.Loop() {
		if err := h.Set(t0.Add(time.Duration(i)*time.Minute), Price(i%500)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
