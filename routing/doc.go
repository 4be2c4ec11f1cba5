// Package routing is the platform's side of an overloaded node: who may be
// given new connections, and which routes are closed while a node is
// overloaded or paused. It is the rulebook of the operators' help page
// "When your node is overloaded", in code the platform imports; it closes
// nothing itself, does no I/O and never reads the clock.
//
// [Policy.Admit] says whether a node takes new connections: not while it
// is paused, overloaded, or cooling down after an overload ("the
// marketplace waits before offering it again"), nor while its max_users is
// filled with live users — the operator's cap, not an overload: no notice,
// no event, no route closed, no cool-down.
//
// [Policy.Plan] returns the routes to close, each with its reason, and the
// node's new [NodeState] (budgets, JSON-marshallable, stored by the
// platform between rounds):
//
//   - On an overloaded exit, users' own routes that moved no traffic for
//     two hours, longest unused first, about 5 % of the node's sessions an
//     hour. Routes of a partner's subscription and of an account's extra
//     links are left: they would be set up again on the same node.
//   - On an overloaded entry nothing unused is closed.
//   - Once the overload has lasted 15 minutes and memory is above 80 %,
//     one route in use every 5 minutes, and only a route whose user
//     already holds the same route (same user, same route key) through
//     another node of the same country at the same price or less, asked of
//     the platform through [Alternatives].
//   - On a paused node every route unused for two hours, of any kind and
//     on either role, at once; above 80 % memory routes in use are moved
//     as above, without waiting 15 minutes.
//
// A node's overload comes from the overload package: [Node.SetOverload]
// copies a Tracker's start, its latest end and the latest reading's memory
// into a Node. The Node keeps them as plain fields, so a platform that
// stores overload state its own way fills them itself.
//
// Readings of the seed where it is silent or could be read two ways:
//
//   - "A user's only route through your node is not closed" stands in the
//     seed's paragraph on routes in use, and is what its rule already
//     implies: a route in use is closed only when its user holds the same
//     route through another node, which the platform must not have closed
//     (plan nodes one after another and record each plan's closures, e.g.
//     with [Index.Remove], before planning the next). So a route in use
//     that is its user's only route with that key is never in a plan.
//     Unused routes are closed as the seed says even when they are the
//     user's only one: the seed closes "a route whose user has moved no
//     traffic for two hours" and, on a paused node, "every route nobody
//     has used for two hours", with no such exception, and such a route
//     carries nothing the user is using.
//   - The partner and extra-link exception is kept for routes in use too
//     while the node is overloaded but not paused: the seed's reason ("they
//     would be set up again on the same node") does not depend on traffic.
//     A paused node is being emptied, and moves routes of any kind.
//   - "Sessions" are the routes on the node when the plan runs. The budget
//     for unused routes is a token bucket (as in golang.org/x/time/rate)
//     that starts with one token, so the first unused route goes at once;
//     it grows only while the node is an overloaded exit and holds at most
//     one hour's worth. Routes in use: one per 5 minutes, measured from the
//     last one closed.
//
// Typical use, once per round per node (e.g. at each 30-second reading):
//
//	var pol routing.Policy // the seed's figures
//	if ok, why := pol.Admit(node, now); !ok {
//		log.Printf("not offering %s: %v", node.ID, why)
//	}
//	plan, err := pol.Plan(now, node, routesOf(node.ID), store)
//	if err != nil {
//		return err
//	}
//	for _, a := range plan.Actions {
//		closeRoute(a.Route.ID, a.Reason) // and store.Remove(a.Route)
//	}
//	node.State = plan.State // persist it with the node
package routing
