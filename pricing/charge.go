package pricing

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Usage is traffic a session carried: Bytes at the instant At.
type Usage struct {
	// At is when the traffic was carried; it prices the traffic at the
	// session's price at that instant.
	At time.Time `json:"at"`
	// Bytes is how much traffic, in bytes (a GB is BytesPerGB bytes).
	Bytes uint64 `json:"bytes"`
}

// Part is the usage a Charge priced at one price: a session's price only
// falls, so each price covers one stretch of time.
type Part struct {
	// Price is the session's price over this part, per GB.
	Price Price `json:"price"`
	// Bytes is the usage priced at Price.
	Bytes uint64 `json:"bytes"`
	// From and To are the first and the last usage instants at Price.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Charge is what a session's usage earns.
//
// Rounding: the exact amount is the sum over usage records of
// bytes × price / 10^9 minor units. Total is that sum rounded down to the
// minor unit once, for the whole charge, never per record or per part;
// Remainder is the fraction rounded away, in billionths of a minor unit
// (0 ≤ Remainder < 10^9). So splitting usage into many small records loses
// nothing, and a session charged in pieces loses nothing either when the
// pieces are combined with [Charge.Add], which carries the remainders.
type Charge struct {
	// Total is the amount earned, in minor units, rounded down.
	Total Money `json:"total"`
	// Remainder is what rounding down left out, in billionths of a minor
	// unit.
	Remainder int64 `json:"remainder_nano"`
	// Bytes is the total usage.
	Bytes uint64 `json:"bytes"`
	// Parts is the usage by price, in time order (so in falling price).
	Parts []Part `json:"parts,omitempty"`
}

// Charge prices session s's usage: each record at the session's price at
// its instant ([History.SessionPrice]). Records may come in any order.
// A record outside the session (before its start, or after its end: a
// closed route earns nothing more) is refused with ErrOutsideSession; a
// total that does not fit (bytes in a uint64, the amount in Money) is
// refused with ErrOverflow. Nothing is charged when any record is refused.
//
// The cost is O(k log n) for k records and n changes.
func (h *History) Charge(s Session, usage []Usage) (Charge, error) {
	start, end, err := h.checkSession(s)
	if err != nil {
		return Charge{}, fmt.Errorf("pricing: charge: %w", err)
	}
	var (
		c      Charge
		byP    = map[Price]int{} // index in c.Parts
		hi, lo uint64            // Σ bytes × price, 128 bits
	)
	for k, u := range usage {
		ns, err := toNanos(u.At)
		if err != nil {
			return Charge{}, fmt.Errorf("pricing: charge: usage %d: %w", k, err)
		}
		if ns < start || ns > end {
			return Charge{}, fmt.Errorf("pricing: charge: usage %d at %v: %w", k, u.At.Round(0), outside(s))
		}
		var carry uint64
		if c.Bytes, carry = bits.Add64(c.Bytes, u.Bytes, 0); carry != 0 {
			return Charge{}, fmt.Errorf("pricing: charge: usage %d: more than %d bytes in all: %w", k, uint64(math.MaxUint64), ErrOverflow)
		}
		price := h.priceAt(s.Locked, start, ns)
		i, ok := byP[price]
		if !ok {
			i = len(c.Parts)
			byP[price] = i
			c.Parts = append(c.Parts, Part{Price: price, From: u.At, To: u.At})
		}
		part := &c.Parts[i]
		part.Bytes += u.Bytes // ≤ c.Bytes, which did not overflow
		if u.At.Before(part.From) {
			part.From = u.At
		}
		if u.At.After(part.To) {
			part.To = u.At
		}
		// Σ bytes × price < 2^64 × 2^63: the 128-bit sum cannot overflow.
		ph, pl := bits.Mul64(u.Bytes, uint64(price))
		lo, carry = bits.Add64(lo, pl, 0)
		hi, _ = bits.Add64(hi, ph, carry)
	}
	slices.SortFunc(c.Parts, func(a, b Part) int { return a.From.Compare(b.From) })
	if hi >= BytesPerGB {
		return Charge{}, fmt.Errorf("pricing: charge: the amount does not fit in int64 minor units: %w", ErrOverflow)
	}
	q, r := bits.Div64(hi, lo, BytesPerGB)
	if q > math.MaxInt64 {
		return Charge{}, fmt.Errorf("pricing: charge: %d minor units does not fit in int64: %w", q, ErrOverflow)
	}
	c.Total, c.Remainder = Money(q), int64(r)
	return c, nil
}

// Add returns the charge for the usage of c and d together, as if it had
// been charged at once: totals add, remainders carry into the total, and
// parts at the same price merge. Use it to charge a running session in
// pieces without losing the fractions.
func (c Charge) Add(d Charge) (Charge, error) {
	for _, x := range []Charge{c, d} {
		if x.Total < 0 || x.Remainder < 0 || x.Remainder >= BytesPerGB {
			return Charge{}, fmt.Errorf("pricing: add charges: total %d, remainder %d not a charge: %w", x.Total, x.Remainder, ErrInvalid)
		}
	}
	rem := c.Remainder + d.Remainder
	total := int64(c.Total) + rem/BytesPerGB
	if int64(d.Total) > math.MaxInt64-total {
		return Charge{}, fmt.Errorf("pricing: add charges: %d + %d minor units: %w", c.Total, d.Total, ErrOverflow)
	}
	bytes, carry := bits.Add64(c.Bytes, d.Bytes, 0)
	if carry != 0 {
		return Charge{}, fmt.Errorf("pricing: add charges: %d + %d bytes: %w", c.Bytes, d.Bytes, ErrOverflow)
	}
	sum := Charge{Total: Money(total + int64(d.Total)), Remainder: rem % BytesPerGB, Bytes: bytes}
	parts := append(slices.Clone(c.Parts), d.Parts...)
	slices.SortStableFunc(parts, func(a, b Part) int {
		return cmp.Or(-cmp.Compare(a.Price, b.Price), a.From.Compare(b.From))
	})
	for _, p := range parts {
		if n := len(sum.Parts); n > 0 && sum.Parts[n-1].Price == p.Price {
			last := &sum.Parts[n-1]
			if last.Bytes, carry = bits.Add64(last.Bytes, p.Bytes, 0); carry != 0 {
				return Charge{}, fmt.Errorf("pricing: add charges: bytes at price %d: %w", p.Price, ErrOverflow)
			}
			if p.To.After(last.To) {
				last.To = p.To
			}
			continue
		}
		sum.Parts = append(sum.Parts, p)
	}
	slices.SortFunc(sum.Parts, func(a, b Part) int { return a.From.Compare(b.From) })
	return sum, nil
}
