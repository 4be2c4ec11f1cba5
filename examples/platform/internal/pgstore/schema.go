package pgstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrationFiles are the schema's versions, in order, one file each:
// migrations/NNN_what.sql takes the schema from version NNN-1 to NNN. A
// new version is a new file; a file once released is never edited.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// readMigrations returns the migrations' statements, version 1 first.
// Files must be numbered from 001 without a gap.
func readMigrations(fsys fs.FS) ([]string, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := make([]string, 0, len(names))
	for i, name := range names {
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		if v, err := strconv.Atoi(num); !ok || err != nil || v != i+1 || len(num) != 3 {
			return nil, fmt.Errorf("migration %s: want %03d_NAME.sql (numbered from 001, without a gap)", name, i+1)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	return out, nil
}

// schemaLock is the advisory lock key replicas take while migrating, so
// two starting at once do not both create the tables.
const schemaLock = 0x6e6f64656b6974 // "nodekit"

// migrate brings the schema to len(migrations), every step with its
// version row in one transaction, under an advisory lock. A database
// whose schema is newer than this binary knows is refused.
func migrate(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}) (from, to int, err error) {
	migrations, err := readMigrations(migrationFiles)
	if err != nil {
		return 0, 0, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback(ctx)
	// A migration (an index over a large table) or the wait for another
	// replica's may take longer than a request's statement: bounded by
	// ctx alone.
	if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
		return 0, 0, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLock); err != nil {
		return 0, 0, err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    integer PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return 0, 0, err
	}
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&from); err != nil {
		return 0, 0, err
	}
	if from > len(migrations) {
		return from, from, fmt.Errorf("schema version %d is newer than this platform knows (%d): run a newer platform", from, len(migrations))
	}
	for v := from; v < len(migrations); v++ {
		if _, err := tx.Exec(ctx, migrations[v]); err != nil {
			return from, v, fmt.Errorf("schema version %d: %w", v+1, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_version (version) VALUES ($1)`, v+1); err != nil {
			return from, v, err
		}
	}
	return from, len(migrations), tx.Commit(ctx)
}

// schemaColumns are the tables and columns the migrations leave, which
// the platform reads and writes (TestSchemaColumns checks them against
// a migrated database; a new migration that changes them changes this).
var schemaColumns = map[string][]string{
	"deliveries":         {"id", "node", "type", "at", "body", "created_at", "status", "attempts", "next_at", "last_status", "last_error", "delivered_at", "seq", "log"},
	"events":             {"id", "node", "kind", "at", "body"},
	"nodes":              {"id", "role", "country", "state", "readings", "overloaded", "next_plan_at", "version", "updated_at"},
	"notices":            {"id", "node", "at", "body", "num"},
	"operator_receivers": {"operator", "body", "updated_at"},
	"routes":             {"id", "node", "user_id", "key", "country", "price", "last_traffic", "relied_on", "body", "closed_at", "closed_by"},
	"schema_version":     {"version", "applied_at"},
}

// checkColumns reports the columns of schemaColumns the database at q
// does not hold, as table.column, in order: a table changed by hand, or
// dropped, since the migrations left it.
func checkColumns(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) error {
	var tables, columns []string
	for _, table := range slices.Sorted(maps.Keys(schemaColumns)) {
		for _, c := range schemaColumns[table] {
			tables, columns = append(tables, table), append(columns, c)
		}
	}
	rows, err := q.Query(ctx, `SELECT w.t || '.' || w.c FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS w (t, c, i)
		WHERE NOT EXISTS (SELECT 1 FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = w.t AND column_name = w.c)
		ORDER BY w.i`, tables, columns)
	if err != nil {
		return err
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(missing) == 0 {
		return err
	}
	return fmt.Errorf("tables not as this platform's migrations left them: missing %s", strings.Join(missing, ", "))
}
