package pinproxy

import "testing"

// LoopLoadsForTest returns how many connections each of p's event loops
// holds; nil without the loops.
func LoopLoadsForTest(p *Proxy) []int {
	if p.loops == nil {
		return nil
	}
	var n []int
	for _, lp := range p.loops.all() {
		n = append(n, int(lp.load.Load()))
	}
	return n
}

// balance keeps a client on the loop that accepted it unless another
// holds fewer connections by more than an eighth of its own; clients
// that arrive together on one loop are so spread, few or many.
func TestBalance(t *testing.T) {
	loopsOf := func(loads ...int32) []*evloop {
		lps := make([]*evloop, len(loads))
		for i, n := range loads {
			lps[i] = &evloop{}
			lps[i].load.Store(n)
		}
		return lps
	}
	for _, tt := range []struct {
		loads []int32 // the first accepts
		want  int
	}{
		{[]int32{0, 0}, 0},
		{[]int32{1, 0}, 1},
		{[]int32{16, 14}, 0}, // fewer by 2, an eighth of 16: stays
		{[]int32{16, 13}, 1},
		{[]int32{80, 70}, 0}, // by 10, an eighth of 80
		{[]int32{80, 69}, 1},
		{[]int32{9, 7, 3}, 2}, // the fewest
	} {
		lps := loopsOf(tt.loads...)
		if got := balance(lps[0], lps); got != lps[tt.want] {
			t.Errorf("loads %v: a client accepted on loop 0 goes elsewhere than loop %d", tt.loads, tt.want)
		}
	}
	// Clients arriving together, all accepted by the loop woken first.
	for _, n := range []int{4, 5, 100} {
		lps := loopsOf(0, 0)
		for range n {
			balance(lps[0], lps).load.Add(1)
		}
		a, b := lps[0].load.Load(), lps[1].load.Load()
		if d := a - b; d < 0 || d > a/8+1 {
			t.Errorf("%d clients together: %d and %d a loop", n, a, b)
		}
		t.Logf("%d clients: %d and %d a loop", n, a, b)
	}
}
