package fleet

import (
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// A node's history runs one way, whichever replica's clock dates a
// change: a replica whose clock is behind another's, or a clock that
// stepped back, dates a change that appends to the node's history no
// earlier than what that history already holds, as routing plans a
// round dated before the node's last with the state's later times taken
// as now. An overload's start and end, dated by the platform's clock,
// follow the same rule (platformClock). Refusing instead would answer a price change, a charge or an
// opened route 400, blaming the caller for the platform's clocks, and a
// charge refused is traffic never earned.

// lastPriceChange is when n's price last changed; zero for none.
func lastPriceChange(n *store.Node) time.Time {
	ch := n.Prices.Changes()
	if len(ch) == 0 {
		return time.Time{}
	}
	return ch[len(ch)-1].At
}

// priceChangeTime is when a price change given at now takes effect: now,
// or just after n's last change if now is not after it (the history
// holds one price an instant, in time order).
func priceChangeTime(n *store.Node, now time.Time) time.Time {
	if last := lastPriceChange(n); !now.After(last) {
		return last.Add(time.Nanosecond)
	}
	return now
}

// openTime is when a route opened at now starts: not before n's last
// price change, so its session locks the price the node asks.
func openTime(n *store.Node, now time.Time) time.Time {
	return laterOf(now, lastPriceChange(n))
}

// trafficTime is when traffic on rt reported at now is charged: not
// before its session started.
func trafficTime(rt *store.Route, now time.Time) time.Time {
	return laterOf(now, rt.Session.Start)
}

// markTime is when a pause or approval given at now is dated: not before
// n's last one.
func markTime(n *store.Node, now time.Time) time.Time {
	if len(n.Marks) == 0 {
		return now
	}
	return laterOf(now, n.Marks[len(n.Marks)-1].At)
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
