package routing

import (
	"hash/maphash"
	"time"

	"github.com/proofkit/nodekit/pricing"
)

// Index is an in-memory [Alternatives]: the routes of a fleet grouped by
// user and route key. It reads the slice it was built from in place (it
// copies no route): the fields it compares (ID, User, Key, Node, Country,
// Price) must not change while the index is in use, while LastTraffic may.
// [Policy.Plan] records its actions in it ([Index.Record]); record other
// closures with [Index.Remove]. Keep one Index across plan rounds: it
// holds which routes moves rely on, and a fresh one knows of none (carry
// them over with [Index.Rely]). An Index is not safe for concurrent use
// while Record, Rely or Remove is called.
type Index struct {
	routes []Route
	seed   maphash.Seed
	// groups maps the hash of a user and a route key to its group's
	// offset in flat. Two pairs whose hashes collide share a group,
	// which is harmless: every lookup compares users and keys.
	groups map[uint64]int32
	// flat holds the groups one after another: at a group's offset a
	// member whose pos is the group's length n, then its n members. A
	// lookup reads one run of flat, and reads a route only when its
	// member already looks like an alternative.
	flat []member
	// relied holds, by route ID, when a move last relied on the route
	// ([Index.Record]).
	relied map[string]time.Time
}

// member is a route in a group, with what [IsAlternative] needs to rule
// it out without reading the route: its price and hashes of its node and
// country. pos is its position in routes, complemented (^i) once the route
// is removed.
type member struct {
	price         pricing.Price
	pos           int32
	node, country uint32
}

func (x *Index) short(s string) uint32 { return uint32(maphash.String(x.seed, s)) }

func (x *Index) hash(user, key string) uint64 {
	// The key's hash is multiplied by an odd constant so that (u, k) and
	// (k, u) differ.
	return maphash.String(x.seed, user) ^ maphash.String(x.seed, key)*0x9e3779b97f4a7c15
}

// NewIndex indexes routes by user and route key. It costs about 76 bytes a
// route beside the routes themselves (measured at a million routes, 2.5 a
// user).
func NewIndex(routes []Route) *Index {
	x := &Index{routes: routes, seed: maphash.MakeSeed(), groups: make(map[uint64]int32, len(routes))}
	// First the group of each route, then each group's offset in flat.
	group := make([]int32, len(routes))
	var count []int32
	for i := range routes {
		h := x.hash(routes[i].User, routes[i].Key)
		g, ok := x.groups[h]
		if !ok {
			g = int32(len(count))
			count = append(count, 0)
			x.groups[h] = g
		}
		group[i] = g
		count[g]++
	}
	off := make([]int32, len(count))
	next := int32(0)
	for g, c := range count {
		off[g] = next
		next += 1 + c
	}
	for h, g := range x.groups {
		x.groups[h] = off[g]
	}
	x.flat = make([]member, next)
	for i, g := range group {
		o := off[g]
		x.flat[o].pos++
		r := &routes[i]
		x.flat[o+x.flat[o].pos] = member{price: r.Price, pos: int32(i), node: x.short(r.Node), country: x.short(r.Country)}
	}
	return x
}

// members returns the group of user and key.
func (x *Index) members(user, key string) []member {
	o, ok := x.groups[x.hash(user, key)]
	if !ok {
		return nil
	}
	return x.flat[o+1 : o+1+x.flat[o].pos]
}

// Alternative returns the cheapest route (the first indexed among equals)
// that is an alternative to r ([IsAlternative]) and was not removed.
func (x *Index) Alternative(r Route) (Route, bool) {
	node, country := x.short(r.Node), x.short(r.Country)
	best := int32(-1)
	for _, m := range x.members(r.User, r.Key) {
		// Rule out by the member's figures first; a hash that matches
		// by chance is settled by the route itself.
		if m.pos < 0 || m.price > r.Price || m.country != country || (best >= 0 && m.price >= x.routes[best].Price) {
			continue
		}
		if m.node == node && x.routes[m.pos].Node == r.Node {
			continue
		}
		if IsAlternative(r, x.routes[m.pos]) {
			best = m.pos
		}
	}
	if best < 0 {
		return Route{}, false
	}
	return x.routes[best], true
}

// Remove records that route r (found by its ID among the routes of its
// user and key) is closed, so it is no longer anybody's alternative. It
// reports whether r was indexed and not yet removed. A route removed is no
// longer relied on either.
func (x *Index) Remove(r Route) bool {
	m := x.members(r.User, r.Key)
	for j := range m {
		i := m[j].pos
		if i < 0 {
			continue
		}
		if o := &x.routes[i]; o.ID == r.ID && o.User == r.User && o.Key == r.Key {
			m[j].pos = ^i
			delete(x.relied, r.ID)
			return true
		}
	}
	return false
}

// Record records a plan's action at: a.Route is removed, and for a move
// a.Keeps is relied on from at ([Index.Rely]).
func (x *Index) Record(at time.Time, a Action) {
	x.Remove(a.Route)
	if a.Reason == ReasonMove && a.Keeps.ID != "" {
		x.Rely(a.Keeps, at)
	}
}

// Rely records that a move relied on route r (by its ID) at at, unless a
// later move did. Record calls it; a platform that builds a new Index (its
// routes changed) calls it to carry over what it kept of the old one's
// ReliedOn.
func (x *Index) Rely(r Route, at time.Time) {
	if x.relied == nil {
		x.relied = make(map[string]time.Time)
	}
	if prev, ok := x.relied[r.ID]; !ok || at.After(prev) {
		x.relied[r.ID] = at
	}
}

// ReliedOn returns when a move last relied on route r (by its ID), or the
// zero time.
func (x *Index) ReliedOn(r Route) time.Time { return x.relied[r.ID] }

var _ Alternatives = (*Index)(nil)
