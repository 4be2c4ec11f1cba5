package routing

// Index is an in-memory [Alternatives]: the routes of a fleet grouped by
// user and route key. It reads the slice it was built from in place (it
// copies no route), so the slice's elements must not change while the
// index is in use; record closures with [Index.Remove]. An Index is not
// safe for concurrent use while Remove is called.
type Index struct {
	routes []Route
	groups map[holding]int32
	// The routes of group g are routes[pos[start[g]:start[g+1]]].
	start  []int32
	pos    []int32
	closed []uint64 // bit i: routes[i] was removed
}

type holding struct{ user, key string }

// NewIndex indexes routes by user and route key. It costs about 60 bytes a
// route beside the routes themselves.
func NewIndex(routes []Route) *Index {
	x := &Index{routes: routes, groups: make(map[holding]int32, len(routes)/2+1)}
	group := make([]int32, len(routes))
	var count []int32
	for i := range routes {
		h := holding{routes[i].User, routes[i].Key}
		g, ok := x.groups[h]
		if !ok {
			g = int32(len(count))
			x.groups[h] = g
			count = append(count, 0)
		}
		group[i] = g
		count[g]++
	}
	x.start = make([]int32, len(count)+1)
	for g, c := range count {
		x.start[g+1] = x.start[g] + c
	}
	x.pos = make([]int32, len(routes))
	next := count[:0] // reuse: next free slot per group
	next = append(next, x.start[:len(count)]...)
	for i, g := range group {
		x.pos[next[g]] = int32(i)
		next[g]++
	}
	x.closed = make([]uint64, (len(routes)+63)/64)
	return x
}

func (x *Index) isClosed(i int32) bool { return x.closed[i/64]&(1<<(i%64)) != 0 }

// Alternative returns the cheapest route (the first indexed among equals)
// that is an alternative to r ([IsAlternative]) and was not removed.
func (x *Index) Alternative(r Route) (Route, bool) {
	g, ok := x.groups[holding{r.User, r.Key}]
	if !ok {
		return Route{}, false
	}
	best := int32(-1)
	for _, i := range x.pos[x.start[g]:x.start[g+1]] {
		if x.isClosed(i) || !IsAlternative(r, x.routes[i]) {
			continue
		}
		if best < 0 || x.routes[i].Price < x.routes[best].Price {
			best = i
		}
	}
	if best < 0 {
		return Route{}, false
	}
	return x.routes[best], true
}

// Remove records that route r (found by its ID among the routes of its
// user and key) is closed, so it is no longer anybody's alternative. It
// reports whether r was indexed and not yet removed.
func (x *Index) Remove(r Route) bool {
	g, ok := x.groups[holding{r.User, r.Key}]
	if !ok {
		return false
	}
	for _, i := range x.pos[x.start[g]:x.start[g+1]] {
		if x.routes[i].ID == r.ID && !x.isClosed(i) {
			x.closed[i/64] |= 1 << (i % 64)
			return true
		}
	}
	return false
}

var _ Alternatives = (*Index)(nil)
