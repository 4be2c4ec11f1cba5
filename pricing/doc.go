// Package pricing states the platform's price lock once, exactly: "A
// session keeps the price it locked for as long as it runs, unless you
// lower yours: a drop reaches it once the lower price has stood for 3
// hours. A rise never reaches them."
//
// A [History] holds one node's price changes in time order. A session locks
// the node's price when it starts ([History.Lock]). Its price at an instant
// t ([History.SessionPrice]) is the lowest of its locked price and, for
// every instant u of the session so far, the highest price the node asked
// during [u − 3 h, u]. So:
//
//   - a rise never reaches a running session;
//   - a drop reaches it once the lower price has stood for 3 hours: a drop
//     at 1:00 reaches it at 4:00, not at 3:59;
//   - a drop undone within 3 hours never reaches it;
//   - a session's price, once lowered, never rises again.
//
// The 3 hours are configurable ([Config]).
//
// Money is integer minor units, never floats: a [Price] is minor units per
// GB (10^9 bytes), a [Money] amount is minor units. [History.Charge] prices
// usage at the session's price at the instant of use, exactly, and rounds
// down to the minor unit once per charge, reporting the fraction left out;
// [Charge.Add] carries it. Overflows are reported, never wrapped. A closed
// route earns nothing more: usage after a session's End is refused.
//
// The price at any instant costs O(log n) in the number of changes;
// [History.Prune] drops history no session still running can need. A
// History and a Session marshal to JSON, so a platform can persist them.
//
// The package is pure: time comes in as arguments, nothing here calls
// time.Now or does I/O.
//
//	h := new(pricing.History) // the zero value: a 3-hour window
//	_ = h.Set(t0, 100)                    // 100 minor units per GB
//	s, _ := h.Lock(t0)                    // a session starts: locks 100
//	_ = h.Set(t0.Add(time.Hour), 80)      // the operator lowers the price
//	p, _ := h.SessionPrice(s, t0.Add(4*time.Hour)) // 80: it stood 3 hours
//	c, _ := h.Charge(s, []pricing.Usage{{At: t0.Add(5 * time.Hour), Bytes: 2e9}})
//	// c.Total == 160
package pricing
