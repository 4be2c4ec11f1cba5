package pinproxy

import (
	"fmt"
	"testing"
	"time"
)

// The least-used choice is one pass over the upstreams under the lock, with
// no allocation up to 64 upstreams.
func BenchmarkPick(b *testing.B) {
	for _, n := range []int{2, 8, 64} {
		b.Run(fmt.Sprint(n, "upstreams"), func(b *testing.B) {
			p := newWithUpstreams(b, n)
			for i, u := range p.upstreams {
				u.live = n - i // the last one is least used
			}
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				var tried [1]uint64
				p.mu.Lock()
				i, _ := p.pickLocked(tried[:], now)
				p.mu.Unlock()
				if i != n-1 {
					b.Fatalf("picked %d", i)
				}
			}
		})
	}
}

func TestPickOrder(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name    string
		live    []int
		backoff []int // minutes of back-off left; 0: none
		tried   []int
		want    int
	}{
		{"all equal: first listed", []int{0, 0, 0}, nil, nil, 0},
		{"least used", []int{2, 1, 3}, nil, nil, 1},
		{"tie between the least used: first listed", []int{2, 1, 1}, nil, nil, 1},
		{"backed-off upstreams come last", []int{0, 5, 7}, []int{1, 0, 0}, nil, 1},
		{"backed-off but all else tried", []int{0, 5, 7}, []int{1, 0, 0}, []int{1, 2}, 0},
		{"among backed-off: least used", []int{3, 1, 0}, []int{1, 1, 0}, []int{2}, 1},
		{"among backed-off equals: oldest failure", []int{0, 0, 0}, []int{3, 2, 2}, nil, 1},
		{"back-off over", []int{1, 0}, []int{-1, 0}, nil, 1},
		{"everything tried", []int{0, 0}, nil, []int{0, 1}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newWithUpstreams(t, len(tt.live))
			for i, u := range p.upstreams {
				u.live = tt.live[i]
				if tt.backoff != nil && tt.backoff[i] != 0 {
					u.backoffUntil = now.Add(time.Duration(tt.backoff[i]) * time.Minute)
				}
			}
			tried := make([]uint64, 1)
			for _, i := range tt.tried {
				tried[0] |= 1 << i
			}
			if got, _ := p.pickLocked(tried, now); got != tt.want {
				t.Errorf("picked %d, want %d", got, tt.want)
			}
		})
	}
}

// More than 64 upstreams use a larger tried set.
func TestPickManyUpstreams(t *testing.T) {
	p := newWithUpstreams(t, 100)
	tried := make([]uint64, 2)
	seen := map[int]bool{}
	for range 100 {
		i, _ := p.pickLocked(tried, time.Now())
		if i < 0 || seen[i] {
			t.Fatalf("picked %d again or none", i)
		}
		seen[i] = true
		tried[i/64] |= 1 << (i % 64)
	}
	if i, _ := p.pickLocked(tried, time.Now()); i != -1 {
		t.Fatalf("picked %d with everything tried", i)
	}
}

// newWithUpstreams returns a proxy with n upstreams, n0:1 to n<n-1>:1, that
// is not serving.
func newWithUpstreams(tb testing.TB, n int) *Proxy {
	tb.Helper()
	ups := make([]string, n)
	for i := range ups {
		ups[i] = fmt.Sprintf("n%d:1", i)
	}
	p, err := New(Config{Upstreams: ups})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
