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
// no event, no route closed, no cool-down. A node that cannot be true (no
// ID, no role, negative counts: [Node.Validate]) is an error, not a
// verdict.
//
// [Policy.Plan] returns the routes to close, each with its reason, and the
// node's new [NodeState] (the pacing, JSON-marshallable, stored by the
// platform between rounds):
//
//   - On an overloaded exit, users' own routes that moved no traffic for
//     two hours, longest unused first, a few at a time: about 5 % of the
//     node's sessions an hour, at any plan period from a second up to 15
//     minutes, and no plan more than its period earns at that rate, plus
//     one. Routes of a partner's subscription and
//     of an account's extra links are left: they would be set up again on
//     the same node.
//   - On an overloaded entry nothing unused is closed.
//   - Once the overload has lasted 15 minutes and memory is above 80 %,
//     one route in use every 5 minutes, and only a route whose user
//     already holds the same route (same user, same route key) through
//     another node of the same country at the same price or less, asked of
//     the platform through [Alternatives]. The move reports that route
//     (Action.Keeps); from then on it counts as in use.
//   - On a paused node every route unused for two hours, of any kind and
//     on either role, at once; above 80 % memory routes in use are moved
//     as above, without waiting 15 minutes.
//
// A node's overload comes from the overload package: [Node.SetOverload]
// copies a Tracker's start, its latest end and the latest reading's memory
// into a Node. The Node keeps them as plain fields, so a platform that
// stores overload state its own way fills them itself.
//
// Readings of the help page where it is silent or could be read two ways:
//
//   - "A user's only route through your node is not closed" stands in the
//     page's paragraph on routes in use, and is what its rule already
//     implies: a route in use is closed only when its user holds the same
//     route through another node, which must not have been closed. Plan
//     records every action in the [Alternatives] it is given before it
//     returns, so planning the nodes one after another over one store
//     (an [Index] kept across rounds) never closes both copies. So a route
//     in use that is its user's only route with that key is never in a
//     plan. Unused routes are closed as the page says even when they are
//     the user's only one: it closes "a route whose user has moved no
//     traffic for two hours" and, on a paused node, "every route nobody
//     has used for two hours", with no such exception, and such a route
//     carries nothing the user is using.
//   - "So that user goes on without connecting again": the route a move
//     keeps is about to carry the user's traffic, though its own traffic
//     may be hours old. For two hours (Policy.UnusedAfter) after the move
//     it counts as in use: no plan closes it as unused, drains it or moves
//     it ([Alternatives.ReliedOn]). The platform does not mark it: Plan
//     records it in the store.
//   - The partner and extra-link exception is kept for routes in use too
//     while the node is overloaded but not paused: the page's reason ("they
//     would be set up again on the same node") does not depend on traffic.
//     A paused node is being emptied, and moves routes of any kind.
//   - "Sessions" are Node.Sessions, or the routes given to Plan when it is
//     zero. "About 5 % … an hour" and "a few at a time" are a pace, not a
//     budget that fills: the next unused route is due one interval (an
//     hour / (5 % of the sessions)) after the last, the pace never lags
//     behind now by more than the time since the last plan, nor by more
//     than the period planned before it (the time between the two plans
//     before), nor by more than an hour, nor starts before the overload,
//     and catches up to now when there was nothing more to close. So at
//     any plan period up to an hour, an hour of overload closes about 5 %
//     (an exit of 1,000 unused sessions closes 700 in a day planned every
//     30 s, 698 every 10 minutes, 693 every hour), one plan no more than
//     its period earns, plus one (every 10 minutes: 8 or 9, not 50 at
//     once; every hour, the hour's 50), nothing is saved up across a gap
//     longer than the period before it (a platform that stopped, a clock
//     that stepped forward) nor from one overload to the next. The
//     overload's start is known, so its first hour is paced from it: the
//     first plan closes what the time since the start earns, plus one
//     (one if planned at the start), and by the first plan an hour in
//     about 5 % are closed at any period (51 of 1,000 planned every 30 s,
//     every 10 minutes or every hour from the start). A node the platform
//     never planned before (or whose state was lost) has no plan before
//     to bound its first one, which closes one.
//     Plans more than an hour apart are each held to an hour's worth, and
//     so close less in an hour. Routes in use: one per 5 minutes,
//     measured from the last one closed.
//   - A stored state that says it moved a route after its own last plan
//     (a last_move in 2126) is refused, not clamped; the pace's due time,
//     in the future by nature, is brought back to at most one interval
//     from now.
//   - Clocks step. A plan for a time before the state's last plan (the
//     clock stepped back, or a round is replayed) is planned, with the
//     state's later times taken as now: the next move waits a whole five
//     minutes and the next unused route at most one interval, so the
//     figures hold in real time and the node goes on shedding load; a
//     state planned in 2126 does not stop its node's plans for a century.
//     A step forward cannot be told from plans far apart: in the five
//     minutes before it, it may let through one more move; unused routes
//     save nothing up across it.
//   - A round repeated after a crash: store the Plan's State (and the
//     store's record of what the moves rely on) before carrying out its
//     actions. A round repeated over the stored state closes nothing the
//     pace has not reached since; one repeated over the old state returns
//     the same actions, which are then carried out twice, harmlessly.
//
// Typical use, once per round per node (e.g. at each 30-second reading),
// over one Index of the fleet's routes kept across rounds:
//
//	var pol routing.Policy // the help page's figures
//	ok, why, err := pol.Admit(node, now)
//	if err != nil {
//		return err // a node that cannot be true
//	}
//	if !ok {
//		log.Printf("not offering %s: %v", node.ID, why)
//	}
//	plan, err := pol.Plan(now, node, routesOf(node.ID), store)
//	if err != nil {
//		return err
//	}
//	for _, a := range plan.Actions {
//		closeRoute(a.Route.ID, a.Reason) // Plan recorded it in store
//	}
//	node.State = plan.State // persist it with the node
package routing
