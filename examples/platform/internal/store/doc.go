// Package store is the platform's model of a node and the interfaces its
// stores implement: what the platform's use cases ask of a store,
// written once above every store.
//
// A Node is everything the platform knows of one node: its routing
// state, overload tracker, price history, live and closed routes,
// notices and events. NodeStore is the narrow interface the use cases
// run on: "run this function on this node, locked" (Update, Read),
// "take this reading, creating the node if need be" (Report), the plan
// round (PlanDue), the route look-ups and the pages. How a store locks,
// batches or caches is its own affair, invisible above this interface.
//
// OutboxStore is a store's outbox of Standard Webhooks deliveries: a
// Delivery is written in the same change as the notice it carries, and
// the notifier claims and settles it. ReceiverStore keeps the operators'
// own receivers.
//
// The errors (ErrUnknownNode, ErrDuplicate, …) are what every store
// returns, and what the HTTP layer maps to status codes.
package store
