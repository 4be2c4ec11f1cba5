package pricing

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
