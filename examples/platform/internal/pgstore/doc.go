// Package pgstore is the platform's PostgreSQL store, for a fleet served
// by several replicas: one transaction per change, holding the node's
// row lock; the notice hour and a plan's closures decided in the
// database; an append-only event list; the outbox of deliveries written
// in the transaction that decides a notice.
//
// It implements store.Store. How it takes a report is its own: a quiet
// node's report decided on its cached copy and written with one
// statement (cache.go), the others batched, one transaction for many
// nodes (batch.go), or run alone (report.go); above the interface, each
// is one NodeStore.Report. Its schema is the numbered migrations/*.sql
// files, embedded, applied in order at Open under an advisory lock
// (schema.go). A -db value's secrets never reach a log line or an error
// (dsn.go).
//
// One concern a file:
//
//	store.go      Store, Options, Open and Close
//	tx.go         transactions run again on a conflict; errors classified
//	node.go       a node's row locked, loaded and written back, with its events
//	report.go     a report's entry, and one taken alone
//	batch.go      reports batched, one transaction for many nodes
//	cache.go      a quiet node's report decided on this replica's copy
//	routes.go     a change of a node (Update: a route opened, traffic, a
//	              price, a pause), its route writes, the alternatives a
//	              move relies on
//	notices.go    the notice hour decided in the database, numbering, paging
//	outbox.go     the deliveries: written with their notice, claimed, settled
//	plan.go       the plan round shared by replicas
//	views.go      a node read (its view, admission), the fleet's pages,
//	              events and plans
//	receivers.go  operators' receivers
//	seed.go       the seed file's nodes added at Open
//	schema.go     migrations
//
//	st, err := pgstore.Open(ctx, "postgres://…", store.Config{}, pgstore.Options{}, seed)
//	defer st.Close()
package pgstore
