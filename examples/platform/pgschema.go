package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// migrations are the schema's versions, in order: migrations[i] takes the
// schema from version i to i+1. A new version is a new entry; an entry
// once released is never edited.
var migrations = []string{
	// 1: nodes, their routes, and the append-only events and notices.
	`
CREATE TABLE nodes (
	id           text PRIMARY KEY,
	role         text,                  -- NULL: reports only, never planned
	country      text NOT NULL DEFAULT '',
	state        json NOT NULL,         -- tracker, prices, plan budgets (a node file without routes); json, not jsonb: kept as written, so a write-back is compared byte for byte and not parsed
	readings     bigint NOT NULL DEFAULT 0,
	overloaded   boolean NOT NULL DEFAULT false,
	next_plan_at timestamptz NOT NULL DEFAULT '-infinity',
	version      bigint NOT NULL DEFAULT 0,
	updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX nodes_plan_due ON nodes (next_plan_at) WHERE role IS NOT NULL;

CREATE TABLE routes (
	id           text PRIMARY KEY,
	node         text NOT NULL REFERENCES nodes (id),
	user_id      text NOT NULL,
	key          text NOT NULL,
	country      text NOT NULL,
	price        bigint NOT NULL,       -- the session's price when the node was last saved
	last_traffic timestamptz,
	relied_on    timestamptz,           -- a move on another node relies on this route since
	body         json NOT NULL,         -- route, session, earned
	closed_at    timestamptz,
	closed_by    json                   -- the plan's action
);
CREATE INDEX routes_live_by_node ON routes (node) WHERE closed_at IS NULL;
CREATE INDEX routes_alternatives ON routes (user_id, key, country, price) WHERE closed_at IS NULL;
CREATE INDEX routes_closed_by_node ON routes (node, closed_at) WHERE closed_at IS NOT NULL;

CREATE TABLE events (
	id   bigserial PRIMARY KEY,
	node text NOT NULL REFERENCES nodes (id),
	kind text NOT NULL,
	at   timestamptz NOT NULL,
	body jsonb NOT NULL
);
CREATE INDEX events_by_node ON events (node, id);

CREATE TABLE notices (
	id   bigserial PRIMARY KEY,
	node text NOT NULL REFERENCES nodes (id),
	at   timestamptz NOT NULL,
	body jsonb NOT NULL
);
CREATE INDEX notices_by_node ON notices (node, at);
`,
	// 2: notices paged by time (GET /notices?after=…).
	`
CREATE INDEX notices_by_time ON notices (at, node);
`,
	// 3: notices paged by id (their primary key), which grows with
	// commits; the index by time is no longer read.
	`
DROP INDEX notices_by_time;
`,
	// 4: the outbox: one row per message, written with its notice.
	`
CREATE TABLE deliveries (
	id           text PRIMARY KEY,      -- webhook-id
	node         text NOT NULL,
	type         text NOT NULL,         -- node.overloaded, node.overload_ended
	at           timestamptz NOT NULL,  -- the notice's (or end's) time
	body         bytea NOT NULL,        -- the message, byte for byte as signed
	created_at   timestamptz NOT NULL,  -- when the platform decided it
	status       text NOT NULL,         -- pending, delivered, failed, undeliverable
	attempts     integer NOT NULL DEFAULT 0,
	next_at      timestamptz,           -- pending: due at (or leased until)
	last_status  integer,
	last_error   text,
	delivered_at timestamptz
);
CREATE INDEX deliveries_due ON deliveries (next_at) WHERE status = 'pending';
CREATE INDEX deliveries_by_node ON deliveries (node, created_at);
`,
	// 5: a node nothing can be planned for (neither overloaded nor
	// paused) has no next plan (NULL): its report rewrites its row
	// without touching an index, so PostgreSQL updates it in place in its
	// page (a HOT update), for which each page keeps room.
	`
ALTER TABLE nodes ALTER COLUMN next_plan_at DROP NOT NULL;
DROP INDEX nodes_plan_due;
CREATE INDEX nodes_plan_due ON nodes (next_plan_at) WHERE role IS NOT NULL AND next_plan_at IS NOT NULL;
ALTER TABLE nodes SET (fillfactor = 70);
`,
	// 6: a notice's number, the id GET /notices shows and pages by, is
	// given after the notice's transaction committed, by a short
	// transaction of its own (numberNotices), so the reports' transactions
	// no longer wait on one another's commits for it. Notices numbered
	// before keep their id as their number.
	`
CREATE SEQUENCE notice_numbers;
ALTER TABLE notices ADD COLUMN num bigint;
UPDATE notices SET num = id;
SELECT setval('notice_numbers', (SELECT coalesce(max(id), 0) + 1 FROM notices), false);
CREATE UNIQUE INDEX notices_by_num ON notices (num);
CREATE INDEX notices_unnumbered ON notices (id) WHERE num IS NULL;
`,
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
