package pricing

import "math"

// order picks the better of two values for a rangeTree: the lower (lowest)
// or the higher (highest).
type order interface {
	pick(a, b int64) int64
	identity() int64
}

type lowest struct{}

func (lowest) pick(a, b int64) int64 { return min(a, b) }
func (lowest) identity() int64       { return math.MaxInt64 }

type highest struct{}

func (highest) pick(a, b int64) int64 { return max(a, b) }
func (highest) identity() int64       { return math.MinInt64 }

// rangeTree is an append-only segment tree over int64 values that answers
// the lowest (or highest) value of any index range in O(log n). An append
// costs O(log n), amortised over the doublings of the backing array. The
// zero value is an empty tree.
type rangeTree[O order] struct {
	o    O
	n    int     // number of values
	size int     // number of leaves, a power of two ≥ n
	v    []int64 // v[size+i] is value i; v[k] = pick(v[2k], v[2k+1])
}

// push appends a value.
func (t *rangeTree[O]) push(x int64) {
	if t.n == t.size {
		t.grow()
	}
	k := t.size + t.n
	t.n++
	t.v[k] = x
	for k > 1 {
		k >>= 1
		t.v[k] = t.o.pick(t.v[2*k], t.v[2*k+1])
	}
}

func (t *rangeTree[O]) grow() {
	size := 2 * t.size
	if size == 0 {
		size = 16
	}
	v := make([]int64, 2*size)
	id := t.o.identity()
	for i := range v {
		v[i] = id
	}
	copy(v[size:], t.v[t.size:t.size+t.n])
	for k := size - 1; k > 0; k-- {
		v[k] = t.o.pick(v[2*k], v[2*k+1])
	}
	t.size, t.v = size, v
}

// query returns the lowest (highest) of values lo..hi inclusive, clipped to
// the values held; the identity when that range is empty.
func (t *rangeTree[O]) query(lo, hi int) int64 {
	r := t.o.identity()
	lo = max(lo, 0)
	hi = min(hi, t.n-1)
	if lo > hi {
		return r
	}
	l, h := lo+t.size, hi+t.size+1
	for l < h {
		if l&1 == 1 {
			r = t.o.pick(r, t.v[l])
			l++
		}
		if h&1 == 1 {
			h--
			r = t.o.pick(r, t.v[h])
		}
		l >>= 1
		h >>= 1
	}
	return r
}
