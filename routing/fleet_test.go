package routing_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// t0 is the start of every scenario.
var t0 = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

// fleet is a miniature platform: nodes, every route ever held (closed ones
// marked), an Index over them, and the plans' actions carried out.
type fleet struct {
	nodes  []*routing.Node
	routes []routing.Route
	closed map[string]bool
	ix     *routing.Index
	// inUse lists the routes that move traffic at every step.
	inUse map[string]bool
	log   []step
}

// step is one plan and what the platform knew when it ran.
type step struct {
	at   time.Time
	node routing.Node // as given to Plan
	plan routing.Plan
	// liveAlt: for each move, whether the kept route was live at that time.
	liveAlt []bool
}

func (f *fleet) add(r routing.Route, inUse bool) {
	f.routes = append(f.routes, r)
	if inUse {
		f.inUse[r.ID] = true
	}
}

func newFleet() *fleet {
	return &fleet{closed: map[string]bool{}, inUse: map[string]bool{}}
}

func (f *fleet) build() { f.ix = routing.NewIndex(f.routes) }

// live returns the node's routes that are not closed.
func (f *fleet) live(node string) []routing.Route {
	var out []routing.Route
	for _, r := range f.routes {
		if r.Node == node && !f.closed[r.ID] {
			out = append(out, r)
		}
	}
	return out
}

// traffic marks the routes in use as having moved traffic at now.
func (f *fleet) traffic(now time.Time) {
	for i := range f.routes {
		if f.inUse[f.routes[i].ID] {
			f.routes[i].LastTraffic = now
		}
	}
}

// round plans every node at now, one after another, and carries out each
// plan before the next node's.
func (f *fleet) round(t testing.TB, pol routing.Policy, now time.Time) {
	t.Helper()
	f.traffic(now)
	for _, n := range f.nodes {
		in := f.live(n.ID)
		p, err := pol.Plan(now, *n, in, f.ix)
		if err != nil {
			t.Fatalf("plan %s at %v: %v", n.ID, now.Sub(t0), err)
		}
		s := step{at: now, node: *n, plan: p}
		for _, a := range p.Actions {
			if a.Reason == routing.ReasonMove {
				s.liveAlt = append(s.liveAlt, !f.closed[a.Keeps.ID] && a.Keeps.ID != "")
			}
			if f.closed[a.Route.ID] {
				t.Fatalf("plan %s at %v closes route %s twice", n.ID, now.Sub(t0), a.Route.ID)
			}
			f.closed[a.Route.ID] = true
			f.ix.Remove(a.Route)
		}
		n.State = p.State
		f.log = append(f.log, s)
	}
}

// run plans every step from t0 to t0+d inclusive.
func (f *fleet) run(t testing.TB, pol routing.Policy, every, d time.Duration) {
	t.Helper()
	for at := t0; !at.After(t0.Add(d)); at = at.Add(every) {
		f.round(t, pol, at)
	}
}

// actions returns the actions taken on node, in order.
func (f *fleet) actions(node string) []routing.Action {
	var out []routing.Action
	for _, s := range f.log {
		if s.node.ID == node {
			out = append(out, s.plan.Actions...)
		}
	}
	return out
}

// count returns how many actions on node had the reason.
func (f *fleet) count(node string, why routing.Reason) int {
	n := 0
	for _, a := range f.actions(node) {
		if a.Reason == why {
			n++
		}
	}
	return n
}

func route(id, user, key, node, country string, price pricing.Price, kind routing.Kind, last time.Time) routing.Route {
	return routing.Route{ID: id, User: user, Key: key, Node: node, Country: country,
		Price: price, Kind: kind, LastTraffic: last, Start: last.Add(-time.Hour)}
}

// overloadedScenario is the test fleet: node de-1 (role as given)
// carrying 200 sessions, overloaded since t0 with memory at 91 %, and the
// nodes de-2 and fr-1 holding the alternatives.
//
// On de-1: 60 unused own routes (their users' only routes), 20 unused
// partner and 20 unused extra-link routes; in use: 30 own routes whose
// users hold the same route on de-2 at the same price or less ("ok-"),
// 10 partner routes with such an alternative ("partner-ok-"), and in use
// without a valid alternative: 10 dearer on de-2, 10 in France, 10 users
// with a second route on de-1 itself (20 routes), 10 with another key on
// de-2, and 10 only routes.
func overloadedScenario(role routing.Role) *fleet {
	f := newFleet()
	de1 := &routing.Node{ID: "de-1", Role: role, Country: "DE", Price: 100,
		OverloadedSince: t0, MemoryPercent: 91, MaxUsers: 500, LiveUsers: 200}
	f.nodes = []*routing.Node{de1}
	unused := func(i int) time.Time { return t0.Add(-2*time.Hour - time.Duration(i)*3*time.Minute) }
	for i := range 60 {
		f.add(route(fmt.Sprintf("unused-%02d", i), fmt.Sprintf("u-unused-%02d", i), "vpn-de", "de-1", "DE", 100, routing.KindOwn, unused(i)), false)
	}
	for i := range 20 {
		f.add(route(fmt.Sprintf("partner-unused-%02d", i), fmt.Sprintf("u-pu-%02d", i), "vpn-de", "de-1", "DE", 100, routing.KindPartner, unused(i+60)), false)
		f.add(route(fmt.Sprintf("extra-unused-%02d", i), fmt.Sprintf("u-eu-%02d", i), "vpn-de", "de-1", "DE", 100, routing.KindExtraLink, unused(i+80)), false)
	}
	busy := func(prefix string, n int, kind routing.Kind, alt func(i int, user string) []routing.Route) {
		for i := range n {
			user := fmt.Sprintf("u-%s-%02d", prefix, i)
			f.add(route(fmt.Sprintf("%s-%02d", prefix, i), user, "vpn-de", "de-1", "DE", 100, kind, t0), true)
			if alt != nil {
				for _, r := range alt(i, user) {
					f.add(r, true)
				}
			}
		}
	}
	busy("ok", 30, routing.KindOwn, func(i int, u string) []routing.Route {
		return []routing.Route{route("alt-ok-"+u, u, "vpn-de", "de-2", "DE", pricing.Price(90+10*(i%2)), routing.KindOwn, t0)}
	})
	busy("partner-ok", 10, routing.KindPartner, func(i int, u string) []routing.Route {
		return []routing.Route{route("alt-pok-"+u, u, "vpn-de", "de-2", "DE", 100, routing.KindPartner, t0)}
	})
	busy("dear", 10, routing.KindOwn, func(i int, u string) []routing.Route {
		return []routing.Route{route("alt-dear-"+u, u, "vpn-de", "de-2", "DE", 101, routing.KindOwn, t0)}
	})
	busy("france", 10, routing.KindOwn, func(i int, u string) []routing.Route {
		return []routing.Route{route("alt-fr-"+u, u, "vpn-de", "fr-1", "FR", 50, routing.KindOwn, t0)}
	})
	busy("twice", 10, routing.KindOwn, func(i int, u string) []routing.Route {
		return []routing.Route{route("second-"+u, u, "vpn-de", "de-1", "DE", 100, routing.KindOwn, t0)}
	})
	busy("otherkey", 10, routing.KindOwn, func(i int, u string) []routing.Route {
		return []routing.Route{route("alt-key-"+u, u, "vpn-nl", "de-2", "DE", 100, routing.KindOwn, t0)}
	})
	busy("only", 10, routing.KindOwn, nil)
	f.build()
	return f
}
