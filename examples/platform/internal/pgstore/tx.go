package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// errConflict: what a transaction relied on changed under it; it is run
// again from the start.
var errConflict = errors.New("concurrent change")

// withNode runs fn on node id in one transaction holding the node's row
// lock, and writes back what fn changed. With create, a node the database
// does not hold is created (and, if fn fails, not kept). A transaction
// that conflicts with another (a deadlock, or a route a move relies on
// closed meanwhile) is run again.
//
// The clock is read once the node is locked, and fn and the write-back
// are given that time.
func (p *Store) withNode(ctx context.Context, id string, create bool, fn func(tx pgx.Tx, n *pgNode, now time.Time) error) error {
	return p.inTx(ctx, func(tx pgx.Tx) error {
		n, err := p.lockNode(ctx, tx, id, create)
		if err != nil {
			return err
		}
		now := p.Now()
		if err := fn(tx, n, now); err != nil {
			return err
		}
		return p.saveNode(ctx, tx, n, now)
	})
}

// inTx runs fn in a transaction, again (up to txAttempts times) when it conflicts
// with another, and maps the database's errors to the platform's.
func (p *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return runTx(func(int) error { return pgx.BeginTxFunc(ctx, p.db, pgx.TxOptions{}, fn) })
}

// txAttempts is how many times a transaction that ends in a deadlock or
// a conflict (retryable) is run.
const txAttempts = 5

// runTx runs a transaction by once (given the attempt, from 0) until it
// succeeds, fails for a reason running it again would not change, or has
// run txAttempts times; it returns the last error, classified.
func runTx(once func(attempt int) error) error {
	var err error
	for attempt := range txAttempts {
		if err = once(attempt); !retryable(err) {
			break
		}
	}
	return classify(err)
}

// inReadTx runs fn, which only reads, in a read-only REPEATABLE READ
// transaction: its statements (a node's row, then its routes, closures
// and notice count) all read one snapshot, so a view never shows a node
// from before a commit with its routes from after it. A read-only
// transaction at that level never fails to serialize.
func (p *Store) inReadTx(ctx context.Context, fn func(pgx.Tx) error) error {
	err := pgx.BeginTxFunc(ctx, p.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
	return classify(err)
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01" // serialization failure, deadlock
	}
	return errors.Is(err, errConflict)
}

// classify maps a database error to the platform's: the server refusing
// one node's write (a constraint, a trigger) fails that node's request
// (ErrUnsaved, 500); the database unreachable, restarting, out of time,
// out of room, refusing sessions, taking no writes or with its tables
// changed by hand is ErrUnavailable (503: the agent retries). The
// platform's own errors pass as they are.
func classify(err error) error {
	if err == nil {
		return nil
	}
	for _, e := range []error{store.ErrUnknown, store.ErrUnknownNode, store.ErrBadInput, store.ErrNotAdmit, store.ErrDuplicate, store.ErrStale, store.ErrUnsaved} {
		if errors.Is(err, e) {
			return err
		}
	}
	// A session the server refused (connections disallowed, a password
	// rotated, a role's connection limit), whatever its code: no node is
	// at fault.
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// The whole database, not one node's write: the agent retries.
		switch pe.Code {
		case "25006": // read_only_sql_transaction
			return fmt.Errorf("%w: the database takes no writes (a standby, or default_transaction_read_only on): %w", store.ErrUnavailable, err)
		case "25P03", // idle_in_transaction_session_timeout: the session was ended
			"55P03": // lock_not_available: a lock_timeout set in -db ran out
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		case "42P01", "42703": // undefined_table, undefined_column: changed by hand
			return fmt.Errorf("%w: the database's tables are not as this platform's migrations left them: %w", store.ErrUnavailable, err)
		}
		switch pe.Code[:2] {
		case "08", "57", "53", "40": // connection, operator intervention (shutdown), resources, conflicts
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return fmt.Errorf("%w: %w", store.ErrUnsaved, err)
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}

// eachRow calls fn after scanning each of rows into scans, as
// pgx.ForEachRow does, for a query whose error is err: rows (nil or
// not) are closed and err returned if it is not nil.
func eachRow(rows pgx.Rows, err error, scans []any, fn func() error) error {
	if err != nil {
		if rows != nil {
			rows.Close()
		}
		return err
	}
	_, err = pgx.ForEachRow(rows, scans, fn)
	return err
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
