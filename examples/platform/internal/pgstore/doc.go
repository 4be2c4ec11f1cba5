// Package pgstore is the platform's PostgreSQL store, for a fleet served
// by several replicas: one transaction per change, holding the node's
// row lock; the notice hour and a plan's closures decided in the
// database; an append-only event list; the outbox of deliveries written
// in the transaction that decides a notice.
//
// It implements store.Store. How it takes a report is its own: a quiet
// node's report decided on its cached copy and written with one
// statement (cache.go), the others batched, one transaction for many
// nodes (batch.go), or run alone; above the interface, each is one
// NodeStore.Report. Its schema is the numbered migrations/*.sql files,
// embedded, applied in order at Open under an advisory lock
// (schema.go). A -db value's secrets never reach a log line or an error
// (dsn.go).
//
//	st, err := pgstore.Open(ctx, "postgres://…", store.Config{}, pgstore.Options{}, seed)
//	defer st.Close()
package pgstore
