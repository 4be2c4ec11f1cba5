package pricing_test

import (
	"fmt"
	"time"

	"github.com/proofkit/nodekit/pricing"
)

// A drop reaches a running session once the lower price has stood for 3
// hours; a rise never does.
func Example() {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var h pricing.History // a 3-hour window
	_ = h.Set(t0, 100)    // 100 minor units per GB
	s, _ := h.Lock(t0)    // a session starts and locks 100

	_ = h.Set(t0.Add(1*time.Hour), 80)  // a drop
	_ = h.Set(t0.Add(5*time.Hour), 150) // a rise
	for _, at := range []time.Duration{3*time.Hour + 59*time.Minute, 4 * time.Hour, 6 * time.Hour} {
		p, _ := h.SessionPrice(s, t0.Add(at))
		asked, _ := h.At(t0.Add(at))
		fmt.Printf("at %v: the node asks %d, the session pays %d\n", at, asked, p)
	}
	// Output:
	// at 3h59m0s: the node asks 80, the session pays 100
	// at 4h0m0s: the node asks 80, the session pays 80
	// at 6h0m0s: the node asks 150, the session pays 80
}

// A drop undone within 3 hours never reaches a running session.
func ExampleHistory_SessionPrice_undone() {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var h pricing.History
	_ = h.Set(t0, 100)
	s, _ := h.Lock(t0)
	_ = h.Set(t0.Add(1*time.Hour), 50)  // a drop to 50…
	_ = h.Set(t0.Add(3*time.Hour), 100) // …undone after 2 hours
	for _, at := range []time.Duration{2 * time.Hour, 4 * time.Hour, 24 * time.Hour} {
		p, _ := h.SessionPrice(s, t0.Add(at))
		fmt.Printf("at %v: %d\n", at, p)
	}
	// Output:
	// at 2h0m0s: 100
	// at 4h0m0s: 100
	// at 24h0m0s: 100
}

// Usage is charged at the session's price at the time of use, rounded down
// to the minor unit once per charge.
func ExampleHistory_Charge() {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var h pricing.History
	_ = h.Set(t0, 150) // 1.50 per GB, in cents
	s, _ := h.Lock(t0)
	_ = h.Set(t0.Add(time.Hour), 90)

	var usage []pricing.Usage
	for m := 0; m < 6*60; m += 30 { // 0.25 GB every half hour for 6 hours
		usage = append(usage, pricing.Usage{At: t0.Add(time.Duration(m) * time.Minute), Bytes: 250_000_000})
	}
	s.End = t0.Add(6 * time.Hour) // the route is closed
	c, err := h.Charge(s, usage)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range c.Parts {
		fmt.Printf("%d bytes at %d per GB, %v to %v\n", p.Bytes, p.Price, p.From.Sub(t0), p.To.Sub(t0))
	}
	fmt.Printf("total %d cents, %d billionths of a cent left out\n", c.Total, c.Remainder)

	_, err = h.Charge(s, []pricing.Usage{{At: t0.Add(7 * time.Hour), Bytes: 1}})
	fmt.Println(err)
	// Output:
	// 2000000000 bytes at 150 per GB, 0s to 3h30m0s
	// 1000000000 bytes at 90 per GB, 4h0m0s to 5h30m0s
	// total 390 cents, 0 billionths of a cent left out
	// pricing: charge: usage 0 at 2026-11-30 07:00:00 +0000 UTC: session ran from 2026-11-30 00:00:00 +0000 UTC to 2026-11-30 06:00:00 +0000 UTC: outside the session
}

// A running session charged in pieces (say, hourly) loses no fraction of a
// minor unit when the pieces are added up.
func ExampleCharge_Add() {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var h pricing.History
	_ = h.Set(t0, 3) // 3 minor units per GB
	s, _ := h.Lock(t0)

	var sum pricing.Charge
	for i := range 10 {
		piece, _ := h.Charge(s, []pricing.Usage{{At: t0.Add(time.Duration(i) * time.Hour), Bytes: 100_000_000}})
		sum, _ = sum.Add(piece)
		if i == 0 {
			fmt.Printf("one piece: %d, remainder %d\n", piece.Total, piece.Remainder)
		}
	}
	fmt.Printf("ten pieces: %d, remainder %d\n", sum.Total, sum.Remainder)
	// Output:
	// one piece: 0, remainder 300000000
	// ten pieces: 3, remainder 0
}
