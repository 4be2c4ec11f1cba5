package pricing

import (
	"fmt"
	"slices"
	"time"
)

// Price is what a node asks for traffic, in minor units of the platform's
// currency per GB, where a GB is 10^9 bytes ([BytesPerGB]). A price is never
// negative.
type Price int64

// Money is an amount in minor units of the platform's currency (cents, for
// a currency with cents).
type Money int64

const (
	// BytesPerGB is the GB a Price is quoted per: 10^9 bytes.
	BytesPerGB = 1_000_000_000

	// DefaultWindow is how long a lower price must stand before it reaches
	// a running session: the operators' help page's 3 hours.
	DefaultWindow = 3 * time.Hour
	// MaxWindow is the longest window a History accepts.
	MaxWindow = 366 * 24 * time.Hour
)

// The range of instants the package accepts, in nanoseconds since the Unix
// epoch: from 1970-01-01 up to, not including, 2200-01-01 UTC. Within it,
// an instant plus or minus MaxWindow never overflows an int64.
const (
	minNanos = 0
	maxNanos = 7258118400 * int64(time.Second)
)

// Config configures a History. The zero value is the help page's rule (3 hours).
type Config struct {
	// Window is how long a lower price must stand before it reaches a
	// running session. Zero means DefaultWindow (3 hours); it must not be
	// negative or above MaxWindow.
	Window time.Duration
}

// Change is one price change of a node: from At on, the node asks Price.
type Change struct {
	// At is when the node started asking Price.
	At time.Time `json:"at"`
	// Price is what the node asks from At until its next change.
	Price Price `json:"price"`
}

// History is the price history of one node: its price changes in time
// order. It locks sessions at their start ([History.Lock]) and gives a
// session's price at any instant ([History.SessionPrice]) and the charge for
// its usage ([History.Charge]).
//
// The zero value is an empty history with the default 3-hour window. A
// History must not be copied after first use. It is not safe for concurrent
// use, but queries (At, Lock, SessionPrice, Charge, Changes, MarshalJSON)
// do not modify it, so any number of goroutines may query one that none is
// changing.
//
// Queries about instants after the last change assume the node's price
// stays as it is: record each change when it happens, before charging
// usage that comes after it.
type History struct {
	window int64 // nanoseconds; 0 means DefaultWindow

	pruned       bool
	prunedBefore int64 // sessions starting earlier are refused (when pruned)

	at    []int64 // change instants, strictly increasing, in Unix nanoseconds
	price []Price // price[i] is asked from at[i] until at[i+1]

	// high holds the prices, for the highest price asked over a range of
	// changes.
	high rangeTree[highest]
	// reach holds, for each change i whose window has closed (a later
	// change falls after at[i]+window), the highest price asked during
	// [at[i], at[i]+window]: the price a drop at at[i] brings to running
	// sessions at at[i]+window. Changes i ≥ reach.n are still open: their
	// value is the highest price from change i to the last one.
	reach rangeTree[lowest]
}

// NewHistory returns an empty history with the given configuration.
func NewHistory(cfg Config) (*History, error) {
	if cfg.Window < 0 || cfg.Window > MaxWindow {
		return nil, fmt.Errorf("pricing: new history: window %v not within 0 and %v: %w", cfg.Window, MaxWindow, ErrInvalid)
	}
	return &History{window: int64(cfg.Window)}, nil
}

// Window returns how long a lower price must stand before it reaches a
// running session.
func (h *History) Window() time.Duration {
	return time.Duration(h.win())
}

func (h *History) win() int64 {
	if h.window == 0 {
		return int64(DefaultWindow)
	}
	return h.window
}

// Len returns the number of price changes the history holds.
func (h *History) Len() int { return len(h.at) }

// Changes returns a copy of the price changes the history holds, in time
// order, with times in UTC.
func (h *History) Changes() []Change {
	c := make([]Change, len(h.at))
	for i := range h.at {
		c[i] = Change{At: fromNanos(h.at[i]), Price: h.price[i]}
	}
	return c
}

// Set records that from at on the node asks price. Changes must come in
// time order: a change at or before the last one is refused with
// ErrOutOfOrder (two changes at one instant are refused too; the history
// never holds two prices for one instant). A negative price is refused
// with ErrInvalid. Setting the price the node already asks is allowed and
// changes nothing about any session's price.
//
// Set costs O(log n), amortised.
func (h *History) Set(at time.Time, price Price) error {
	ns, err := toNanos(at)
	if err != nil {
		return fmt.Errorf("pricing: price change at %v: %w", at.Round(0), err)
	}
	if price < 0 {
		return fmt.Errorf("pricing: price change at %v: negative price %d: %w", at.Round(0), price, ErrInvalid)
	}
	if n := len(h.at); n > 0 && ns <= h.at[n-1] {
		return fmt.Errorf("pricing: price change at %v: not after the last change at %v: %w",
			at.Round(0), fromNanos(h.at[n-1]), ErrOutOfOrder)
	}
	h.push(ns, price)
	return nil
}

// push appends a change known to be valid and in order.
func (h *History) push(ns int64, price Price) {
	n, w := len(h.at), h.win()
	// The windows of open changes that end before this one close now: the
	// highest price in [at[i], at[i]+w] is final. Every change closes once.
	for i := h.reach.n; i < n && h.at[i]+w < ns; i++ {
		h.reach.push(h.high.query(i, n-1))
	}
	h.at = append(h.at, ns)
	h.price = append(h.price, price)
	h.high.push(int64(price))
}

// At returns the price the node asks at t.
func (h *History) At(t time.Time) (Price, error) {
	ns, err := toNanos(t)
	if err != nil {
		return 0, fmt.Errorf("pricing: price at %v: %w", t.Round(0), err)
	}
	if h.pruned && ns < h.prunedBefore-h.win() {
		return 0, fmt.Errorf("pricing: price at %v: history before %v was pruned: %w",
			t.Round(0), fromNanos(h.prunedBefore-h.win()), ErrPruned)
	}
	i := h.lastAtOrBefore(ns)
	if i < 0 {
		return 0, h.noPrice("price at", t)
	}
	return h.price[i], nil
}

func (h *History) noPrice(what string, t time.Time) error {
	if len(h.at) == 0 {
		return fmt.Errorf("pricing: %s %v: the node has no price yet: %w", what, t.Round(0), ErrNoPrice)
	}
	return fmt.Errorf("pricing: %s %v: before the node's first price at %v: %w", what, t.Round(0), fromNanos(h.at[0]), ErrNoPrice)
}

// Prune drops the history that no session starting at or after before can
// need: every change before the one in effect at before − window.
// Afterwards Lock and SessionPrice refuse sessions that started before
// before, and At refuses instants before before − window, with ErrPruned;
// answers for everything else are unchanged. Pruning to an earlier instant
// than a previous Prune does nothing. Prune costs O(n log n) in the
// changes it keeps: it pushes each of them into fresh range trees.
func (h *History) Prune(before time.Time) error {
	b, err := toNanos(before)
	if err != nil {
		return fmt.Errorf("pricing: prune before %v: %w", before.Round(0), err)
	}
	if h.pruned && b <= h.prunedBefore {
		return nil
	}
	h.pruned, h.prunedBefore = true, b
	k := h.lastAtOrBefore(b - h.win())
	if k <= 0 {
		return nil
	}
	at, price := slices.Clone(h.at[k:]), slices.Clone(h.price[k:])
	h.at, h.price = nil, nil
	h.high, h.reach = rangeTree[highest]{}, rangeTree[lowest]{}
	for i := range at {
		h.push(at[i], price[i])
	}
	return nil
}

// lastAtOrBefore returns the index of the last change at or before ns, or
// −1 when there is none.
func (h *History) lastAtOrBefore(ns int64) int {
	i, found := slices.BinarySearch(h.at, ns)
	if found {
		return i
	}
	return i - 1
}

// firstAfter returns the index of the first change after ns, or len(h.at)
// when there is none.
func (h *History) firstAfter(ns int64) int {
	i, found := slices.BinarySearch(h.at, ns)
	if found {
		return i + 1
	}
	return i
}

func toNanos(t time.Time) (int64, error) {
	if t.Before(time.Unix(0, minNanos)) || !t.Before(time.Unix(0, maxNanos)) {
		return 0, fmt.Errorf("time %v outside 1970 to 2200: %w", t.Round(0), ErrInvalid)
	}
	return t.UnixNano(), nil
}

func fromNanos(ns int64) time.Time { return time.Unix(0, ns).UTC() }
