package pricing

import (
	"errors"
	"math"
	"math/big"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestChargeAcrossADrop(t *testing.T) {
	h := build(t, Config{}, change{0, 100}, change{hour, 80})
	s, err := h.Lock(t0)
	if err != nil {
		t.Fatal(err)
	}
	s.End = hours(6)
	c, err := h.Charge(s, []Usage{
		{At: hours(5), Bytes: 1e9},   // 80 per GB: the drop has stood 3 hours
		{At: hours(2), Bytes: 1e9},   // 100 per GB
		{At: hours(6), Bytes: 5e8},   // 80 per GB, at the end: still earned
		{At: hours(3.5), Bytes: 1e9}, // 100 per GB
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Charge{Total: 100 + 80 + 40 + 100, Bytes: 3.5e9, Parts: []Part{
		{Price: 100, Bytes: 2e9, From: hours(2), To: hours(3.5)},
		{Price: 80, Bytes: 1.5e9, From: hours(5), To: hours(6)},
	}}
	if !equalCharge(c, want) {
		t.Fatalf("charge\n%+v, want\n%+v", c, want)
	}
}

func equalCharge(a, b Charge) bool {
	return a.Total == b.Total && a.Remainder == b.Remainder && a.Bytes == b.Bytes &&
		slices.EqualFunc(a.Parts, b.Parts, func(x, y Part) bool {
			return x.Price == y.Price && x.Bytes == y.Bytes && x.From.Equal(y.From) && x.To.Equal(y.To)
		})
}

func TestChargeRounding(t *testing.T) {
	tests := []struct {
		name      string
		price     Price
		usage     []uint64
		total     Money
		remainder int64
	}{
		// 1.5 minor units each: rounding per record would give 10.
		{"rounded down once, not per record", 150, slices.Repeat([]uint64{1e7}, 10), 15, 0},
		{"a byte at 1 per GB", 1, []uint64{1}, 0, 1},
		{"the fraction is reported", 7, []uint64{333_333_333, 333_333_333, 333_333_333}, 6, 999_999_993},
		{"a free node", 0, []uint64{1e12}, 0, 0},
		{"no usage", 100, nil, 0, 0},
		{"the largest amount that fits", math.MaxInt64, []uint64{1e9}, math.MaxInt64, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := build(t, Config{}, change{0, tt.price})
			s, _ := h.Lock(t0)
			var usage []Usage
			for i, b := range tt.usage {
				usage = append(usage, Usage{At: t0.Add(time.Duration(i) * time.Second), Bytes: b})
			}
			c, err := h.Charge(s, usage)
			if err != nil {
				t.Fatal(err)
			}
			if c.Total != tt.total || c.Remainder != tt.remainder {
				t.Fatalf("total %d remainder %d, want %d and %d", c.Total, c.Remainder, tt.total, tt.remainder)
			}
		})
	}
}

func TestChargeOverflow(t *testing.T) {
	tests := []struct {
		name  string
		price Price
		usage []uint64
	}{
		{"one minor unit past int64", math.MaxInt64, []uint64{1e9 + 1}},
		{"far past int64", math.MaxInt64, []uint64{math.MaxUint64}},
		{"the most bytes at a low price fit", 1, []uint64{math.MaxUint64}}, // 18 minor units
		{"bytes past uint64", 1, []uint64{math.MaxUint64, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := build(t, Config{}, change{0, tt.price})
			s, _ := h.Lock(t0)
			var usage []Usage
			for _, b := range tt.usage {
				usage = append(usage, Usage{At: t0, Bytes: b})
			}
			c, err := h.Charge(s, usage)
			exact := new(big.Int).Mul(new(big.Int).SetUint64(tt.usage[0]), big.NewInt(int64(tt.price)))
			exact.Quo(exact, big.NewInt(BytesPerGB))
			fits := len(tt.usage) == 1 && exact.IsInt64()
			switch {
			case fits && err != nil:
				t.Fatalf("%v, want %v", err, exact)
			case fits && c.Total != Money(exact.Int64()):
				t.Fatalf("total %d, want %v", c.Total, exact)
			case !fits && !errors.Is(err, ErrOverflow):
				t.Fatalf("total %d, error %v; want ErrOverflow", c.Total, err)
			}
		})
	}
	if _, err := (Charge{Total: math.MaxInt64}).Add(Charge{Total: 1}); !errors.Is(err, ErrOverflow) {
		t.Errorf("adding past int64: %v", err)
	}
	if _, err := (Charge{Total: math.MaxInt64 - 1, Remainder: 6e8}).Add(Charge{Total: 1, Remainder: 6e8}); !errors.Is(err, ErrOverflow) {
		t.Errorf("a carried remainder past int64: %v", err)
	}
	if _, err := (Charge{Bytes: math.MaxUint64}).Add(Charge{Bytes: 1}); !errors.Is(err, ErrOverflow) {
		t.Errorf("adding bytes past uint64: %v", err)
	}
	if _, err := (Charge{Remainder: 1e9}).Add(Charge{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("adding a remainder of a whole unit: %v", err)
	}
}

// Total is the exact sum rounded down once; splitting records, or charging
// in pieces and adding, changes nothing.
func TestPropertyChargeExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h, s := genSession(t)
		n := rapid.IntRange(0, 30).Draw(t, "records")
		var usage []Usage
		exact := new(big.Int)
		for range n {
			u := Usage{
				At:    minutesAfter(t, s.Start, 2000, "at"),
				Bytes: rapid.Uint64Range(0, 1e12).Draw(t, "bytes"),
			}
			usage = append(usage, u)
			p := refSampled(h, s.Locked, s.Start.UnixNano(), u.At.UnixNano(), int64(time.Minute))
			exact.Add(exact, new(big.Int).Mul(new(big.Int).SetUint64(u.Bytes), big.NewInt(int64(p))))
		}
		c, err := h.Charge(s, usage)
		if err != nil {
			t.Fatal(err)
		}
		q, r := new(big.Int).QuoRem(exact, big.NewInt(BytesPerGB), new(big.Int))
		if c.Total != Money(q.Int64()) || c.Remainder != r.Int64() {
			t.Fatalf("total %d remainder %d, exact %v and %v", c.Total, c.Remainder, q, r)
		}
		var parts uint64
		for i, p := range c.Parts {
			parts += p.Bytes
			if i > 0 && (p.Price >= c.Parts[i-1].Price || !p.From.After(c.Parts[i-1].To)) {
				t.Fatalf("parts not in time and falling price order: %+v", c.Parts)
			}
		}
		if parts != c.Bytes {
			t.Fatalf("parts carry %d bytes of %d", parts, c.Bytes)
		}

		// Every record split in two.
		var split []Usage
		for _, u := range usage {
			a := rapid.Uint64Range(0, u.Bytes).Draw(t, "split")
			split = append(split, Usage{At: u.At, Bytes: a}, Usage{At: u.At, Bytes: u.Bytes - a})
		}
		cs, err := h.Charge(s, split)
		if err != nil {
			t.Fatal(err)
		}
		if !equalCharge(cs, c) {
			t.Fatalf("split records: %+v, whole: %+v", cs, c)
		}

		// Charged in pieces, added up.
		var sum Charge
		for rest := usage; len(rest) > 0; {
			k := rapid.IntRange(1, len(rest)).Draw(t, "piece")
			piece, err := h.Charge(s, rest[:k])
			if err != nil {
				t.Fatal(err)
			}
			if sum, err = sum.Add(piece); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		if !equalCharge(sum, c) {
			t.Fatalf("added pieces: %+v, at once: %+v", sum, c)
		}
	})
}
