package main

// Every call the platform makes into the routing package is in this file,
// so a change of routing's API is adapted in one place.

import (
	"time"

	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// admitNode answers whether n takes new connections at now, and why not.
// A node that is not registered yet (no role) or is invalid is an error,
// which the platform shows as not admitted with the error's words.
func admitNode(pol routing.Policy, n routing.Node, now time.Time) (bool, routing.Reason, error) {
	return pol.Admit(n, now)
}

// sameBudgets reports whether two plan states hold the same budgets; the
// plan time alone is not worth a write: the budgets, which pace moves and
// closures, are what the next plan needs. The period between plans is
// not worth one either: a stale stored period only bounds how far the
// pace may fall behind after a restart.
func sameBudgets(a, b routing.NodeState) bool {
	a.PlannedAt, b.PlannedAt = time.Time{}, time.Time{}
	a.Period, b.Period = 0, 0
	return a.Equal(b)
}

// offeredAgain is when a node whose overload ended at ended is offered
// again.
func offeredAgain(pol routing.Policy, ended time.Time) time.Time {
	return pol.OfferedAgain(ended)
}

// planNode runs one plan round for n over its live routes (all of them:
// the unused budget is a share of the node's sessions).
func planNode(pol routing.Policy, now time.Time, n routing.Node, routes []routing.Route, alts routing.Alternatives) (routing.Plan, error) {
	return pol.Plan(now, n, routes, alts)
}

// reliesOn is the route a closure relies on, the user's other copy that
// carries the user on; false for an action that relies on none (an unused
// route).
func reliesOn(a routing.Action) (routing.Route, bool) {
	return a.Keeps, a.Reason == routing.ReasonMove && a.Keeps.ID != ""
}

// setOverload copies the tracker's overload start and end, and the
// reading's memory, into the node routing plans.
func setOverload(n *routing.Node, t *overload.Tracker, latest overload.Reading) {
	n.SetOverload(t, latest)
}

// validatePolicy checks the routing policy at start.
func validatePolicy(pol routing.Policy) error { return pol.Validate() }

// memIndex is routing's in-memory index of every live route, for the file
// store's plan rounds.
type memIndex = routing.Index

func newMemIndex(routes []routing.Route) *memIndex { return routing.NewIndex(routes) }
