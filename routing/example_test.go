package routing_test

import (
	"fmt"
	"time"

	"github.com/proofkit/nodekit/routing"
)

// The operators' help page's example: an exit whose memory stood at 91 % in 3 of 5
// readings, with 200 sessions, planned every 30 seconds for an hour.
func Example() {
	start := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	node := routing.Node{ID: "de-fra-7", Role: routing.RoleExit, Country: "DE",
		OverloadedSince: start, MemoryPercent: 91}

	// 200 sessions: 100 unused for hours, 100 in use, of which 20 are
	// users who hold the same route through de-ber-2 at the same price.
	var all []routing.Route
	for i := range 200 {
		r := routing.Route{ID: fmt.Sprintf("r%03d", i), User: fmt.Sprintf("user%03d", i), Key: "vpn-de",
			Node: node.ID, Country: "DE", Price: 300, Kind: routing.KindOwn,
			Start: start.Add(-6 * time.Hour), LastTraffic: start.Add(-3*time.Hour - time.Duration(i)*time.Minute)}
		if i >= 100 {
			r.LastTraffic = start
		}
		all = append(all, r)
		if i >= 180 {
			all = append(all, routing.Route{ID: r.ID + "-ber", User: r.User, Key: "vpn-de",
				Node: "de-ber-2", Country: "DE", Price: 300, Kind: routing.KindOwn, Start: r.Start, LastTraffic: start})
		}
	}
	store := routing.NewIndex(all)
	closed := map[string]bool{}

	var pol routing.Policy // the figures of the operators' help page
	ok, why, err := pol.Admit(node, start)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("Memory 91%% in 3 of 5 readings:\n  new connections  admitted %v: %v\n", ok, why)

	moved, unused := 0, 0
	for now := start; now.Before(start.Add(time.Hour)); now = now.Add(30 * time.Second) {
		var routes []routing.Route
		for i := range all {
			if all[i].Node == node.ID && !closed[all[i].ID] {
				routes = append(routes, all[i])
			}
		}
		plan, err := pol.Plan(now, node, routes, store)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, a := range plan.Actions {
			closed[a.Route.ID] = true // Plan recorded it in the store
			switch a.Reason {
			case routing.ReasonMove:
				moved++
				if moved == 1 {
					fmt.Printf("  first move at %v: %v\n", now.Sub(start), a)
				}
			case routing.ReasonUnused:
				unused++
			}
		}
		node.State = plan.State
	}
	fmt.Printf("  routes in use    moved %d in an hour, 1 per 5 min from the 15th\n", moved)
	fmt.Printf("  unused routes    closed %d of 200 in an hour (5 %%)\n", unused)
	// Output:
	// Memory 91% in 3 of 5 readings:
	//   new connections  admitted false: the node is overloaded
	//   first move at 15m0s: close route r180 of user user180: in use; the user keeps route r180-ber through node de-ber-2 (DE, price 300 against 300)
	//   routes in use    moved 9 in an hour, 1 per 5 min from the 15th
	//   unused routes    closed 10 of 200 in an hour (5 %)
}

func ExamplePolicy_Admit() {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	pol := routing.Policy{} // cool-down 10 minutes
	exit := routing.RoleExit
	for _, n := range []routing.Node{
		{ID: "healthy", Role: exit, MaxUsers: 50, LiveUsers: 20},
		{ID: "full", Role: exit, MaxUsers: 50, LiveUsers: 50},
		{ID: "overloaded", Role: exit, OverloadedSince: now.Add(-time.Minute)},
		{ID: "recovered", Role: exit, OverloadEnded: now.Add(-4 * time.Minute)},
		{ID: "paused", Role: exit, Paused: true},
		{ID: "unknown"}, // no role: never registered
	} {
		ok, why, err := pol.Admit(n, now)
		switch {
		case err != nil:
			fmt.Printf("%-10s error: %v\n", n.ID, err)
		case ok:
			fmt.Printf("%-10s admitted\n", n.ID)
		default:
			fmt.Printf("%-10s refused: %s\n", n.ID, string(why))
		}
	}
	// Output:
	// healthy    admitted
	// full       refused: full
	// overloaded refused: overloaded
	// recovered  refused: cool-down
	// paused     refused: paused
	// unknown    error: routing: node "unknown": Role is Role(0), neither entry nor exit: invalid input
}

// A paused node is being emptied: every route unused for two hours goes at
// once, whoever set it up; a route in use goes only when memory is above
// 80 % and its user holds the same route elsewhere.
func ExamplePolicy_Plan() {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	node := routing.Node{ID: "nl-ams-3", Role: routing.RoleEntry, Country: "NL", Paused: true, MemoryPercent: 84}
	routes := []routing.Route{
		{ID: "a", User: "ann", Key: "nl", Node: "nl-ams-3", Country: "NL", Price: 200, Kind: routing.KindPartner,
			Start: now.Add(-9 * time.Hour), LastTraffic: now.Add(-5 * time.Hour)},
		{ID: "b", User: "bob", Key: "nl", Node: "nl-ams-3", Country: "NL", Price: 200, Kind: routing.KindOwn,
			Start: now.Add(-3 * time.Hour)},
		{ID: "c", User: "cem", Key: "nl", Node: "nl-ams-3", Country: "NL", Price: 200, Kind: routing.KindOwn,
			Start: now.Add(-time.Hour), LastTraffic: now},
		{ID: "d", User: "dan", Key: "nl", Node: "nl-ams-3", Country: "NL", Price: 200, Kind: routing.KindOwn,
			Start: now.Add(-time.Hour), LastTraffic: now},
	}
	elsewhere := routing.Route{ID: "c2", User: "cem", Key: "nl", Node: "nl-rtm-1", Country: "NL", Price: 180,
		Kind: routing.KindOwn, Start: now.Add(-time.Hour)}
	store := routing.NewIndex(append([]routing.Route{elsewhere}, routes...))

	plan, err := routing.Policy{}.Plan(now, node, routes, store)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range plan.Actions {
		fmt.Println(a)
	}
	// Output:
	// close route a of user ann: unused for 5h0m; unused route on a paused node
	// close route b of user bob: unused for 3h0m; unused route on a paused node
	// close route c of user cem: in use; the user keeps route c2 through node nl-rtm-1 (NL, price 180 against 200)
}
