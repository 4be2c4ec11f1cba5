// Package fleet is the platform's use cases, each written once over a
// store.Store: take a node's reading and plan the node (Report), admit
// and open routes, charge traffic, set prices and caps, pause and
// approve, plan every due node (PlanRound), the views and pages, the
// notices and their deliveries, and the operators' own receivers.
//
// Each use case reads the store's clock once, with the node locked, and
// hands that time to the pure packages (overload, routing, pricing); the
// store keeps what it changed. A report, for example:
//
//	out, err := f.Report(ctx, reading)
//
// runs Take (the tracker observes the reading) and then the plan on the
// node, inside one NodeStore.Report; how the store locks, batches or
// caches is its own.
package fleet
