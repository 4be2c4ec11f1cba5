package store

import (
	"context"
	"time"

	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// NodeStore is what the use cases need of a store to change or show one
// node: the node locked against every other change of it, or as last
// kept. Both stores implement it (the file store under its one lock,
// PostgreSQL in a transaction holding the node's row lock).
type NodeStore interface {
	// Update runs fn on node id, locked, and keeps what fn changed when
	// it returns nil; when it returns an error, nothing of it is kept.
	// An unknown node is an error wrapping ErrUnknownNode. now is the
	// store's clock read once the node is locked, so that the changes
	// of one node are dated in the order they are made (a price history
	// refuses a change dated before the last).
	Update(ctx context.Context, id string, fn func(n *Node, now time.Time, tx NodeTx) error) error
	// Read runs fn on node id as last kept, for showing it at now; with
	// history, n also holds its latest closures and n.NoticeCount its
	// notices. fn must not change n.
	Read(ctx context.Context, id string, history bool, fn func(n *Node, now time.Time) error) error
	// Report takes a reading of node id: run's Take, then its Plan, on the node
	// locked, created if the store does not hold it; what they changed,
	// the event, notice and closures they decided (node.ClearChange's
	// fields) included, is kept when both return nil. take's error is
	// the reading's own (refused): nothing of it is kept, and a node
	// created for it is not. It returns the notice as kept: nil when
	// the store refused it (PostgreSQL decides the one notice an hour in
	// the database too).
	//
	// How is the store's: it may run take and plan again (a transaction
	// run again), run them beside other reports' in one transaction
	// (batching), or run take on its own copy of the node before it
	// locks it and plan there too, keeping the result only if the node
	// has not changed since the copy (PostgreSQL's cache of quiet
	// nodes). So take and plan change only n and what they capture, and
	// plan asks tx for routes only when it needs them.
	Report(ctx context.Context, id string, run ReportRun) (*overload.Notice, error)
	// PlanDue runs plan on every registered node whose plan is due, each
	// locked, and keeps what it changed; a node whose plan fails is
	// logged and left, and the round goes on (PostgreSQL returns an
	// error naming them).
	PlanDue(ctx context.Context, plan PlanFunc) error
	// RouteNode is the node that holds live route id; an error wrapping
	// ErrUnknown when none does.
	RouteNode(ctx context.Context, id string) (string, error)
	// NodeIDs is every node's id, sorted.
	NodeIDs(ctx context.Context) ([]string, error)

	// The pages, each of at most limit items (0: all) after the cursor
	// after, with the last one's cursor:
	//
	// EachNode runs fn on the nodes whose ids sort after after, by id,
	// as one snapshot shows them, with their live routes and notice
	// counts; a node whose stored state cannot be read is given with
	// its error (and n nil). fn must not change n.
	EachNode(ctx context.Context, after string, limit int, fn func(id string, n *Node, now time.Time, err error)) (string, error)
	// Events pages through node id's events, oldest first, by their
	// place in the node's event list (the file store keeps the newest
	// overload.Limits.MaxEvents, PostgreSQL every one).
	Events(ctx context.Context, id string, after int64, limit int) (EventPage, error)
	// Notices pages through every node's notices by id, the order they
	// became visible in.
	Notices(ctx context.Context, after int64, limit int) ([]NumberedNotice, int64, error)
	// Plans pages through each node's latest plan that closed something,
	// by node id.
	Plans(ctx context.Context, after string, limit int) ([]routing.Plan, string, error)
}

// ReportRun is one report's two steps (NodeStore.Report). The use case
// gives them as one value rather than two closures: a report is the
// platform's hot path, and the closures cost it three allocations of
// the eight left (TestReportAllocs in package api).
type ReportRun interface {
	// Take takes the reading on node n at now; its error is the
	// reading's own (refused).
	Take(n *Node, now time.Time) error
	// Plan plans node n at now, asking tx for routes only when it
	// needs them.
	Plan(n *Node, now time.Time, tx NodeTx) error
	// Kept is called once the store has kept the reading and its plan
	// (committed), with the notice it kept, and before it logs the
	// routes the plan closed: what a reading started is logged before
	// what its plan did about it. It is called even when Report's
	// caller has stopped waiting.
	Kept(notice *overload.Notice)
}

// ReportFuncs is the ReportRun of take and plan.
func ReportFuncs(take TakeFunc, plan PlanFunc) ReportRun { return funcsRun{take, plan} }

type funcsRun struct {
	take TakeFunc
	plan PlanFunc
}

func (r funcsRun) Take(n *Node, now time.Time) error            { return r.take(n, now) }
func (r funcsRun) Plan(n *Node, now time.Time, tx NodeTx) error { return r.plan(n, now, tx) }
func (r funcsRun) Kept(*overload.Notice)                        {}

// TakeFunc takes a reading on node n at now (ReportFuncs).
type TakeFunc func(n *Node, now time.Time) error

// PlanFunc plans node n at now (ReportFuncs, NodeStore.PlanDue).
type PlanFunc func(n *Node, now time.Time, tx NodeTx) error

// NodeTx is what a use case may ask of the store while it holds a node.
type NodeTx interface {
	// RouteTaken reports whether a route id is held by a node already.
	RouteTaken(id string) (bool, error)
	// Alternatives loads n's live routes into n, if the store keeps
	// them apart and has not yet, and answers routing's question for a
	// plan of n at now: the alternatives in the whole route table.
	Alternatives(n *Node, now time.Time) (routing.Alternatives, error)
	// Failed is the first error the store met answering alternatives:
	// the change then fails.
	Failed() error
}

// ReceiverStore keeps the operators' receivers; both stores implement
// it.
type ReceiverStore interface {
	// OperatorReceivers is every operator's receiver, by operator.
	OperatorReceivers(ctx context.Context) (map[string]OperatorReceiver, error)
	// OperatorReceiver is operator's receiver; false when they have none.
	OperatorReceiver(ctx context.Context, operator string) (OperatorReceiver, bool, error)
	// UpdateReceiver runs fn on operator's receiver (the zero value when
	// the operator has none), locked, and keeps what fn changed when it
	// returns nil. now is the store's clock, read once it is locked.
	UpdateReceiver(ctx context.Context, operator string, fn func(r *OperatorReceiver, now time.Time) error) error
}

// Store is a whole store: the use cases' NodeStore and ReceiverStore,
// and what wires it.
type Store interface {
	NodeStore
	ReceiverStore
	// Base is the store's rules: its configuration, log, clock and
	// dispatch.
	Base() *Rules
	// Outbox is the store's outbox of deliveries; nil without a dispatch.
	Outbox() OutboxStore
}

// Base is c itself: a store embeds its Rules, which answers Store.Base.
func (c *Rules) Base() *Rules { return c }
