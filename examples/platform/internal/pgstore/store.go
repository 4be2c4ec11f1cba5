package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// Store keeps the platform's state in PostgreSQL, so that several
// replicas can serve one fleet. Every request that changes a node is one
// transaction that starts by locking the node's row (SELECT … FOR
// UPDATE): two replicas given the same node's readings apply them one
// after the other, as one tracker would. What the node's tracker, price
// history and plan budgets hold is one JSON value in that row; routes,
// events and notices are rows of their own.
//
// Every transaction that writes runs at READ COMMITTED (the reads, GETs,
// in one read-only REPEATABLE READ snapshot each: inReadTx), and what
// each rule rests on:
//   - a node's state, its live routes, its readings, admission up to
//     max_users, its charges and closures, its one notice an hour: the
//     node's row lock, taken before anything of the node is read
//     (lockNode); every route write is also conditional on the route
//     being live and as loaded, rows affected checked (saveNode); a
//     quiet node's report decided on this replica's copy of the node is
//     written only if the row's version is still the copy's, which every
//     write of the row moves on (writeQuick);
//   - a node created once, and never deleted once another transaction
//     committed it: the primary key, by what INSERT … ON CONFLICT DO
//     NOTHING RETURNING did (lockNode);
//   - a move's alternative still open, and a route closed as unused not
//     made another move's alternative meanwhile (rules across two nodes,
//     which no node lock covers): the routes' row locks, taken in ID
//     order, and the columns re-checked under them (saveNode);
//   - a route ID held by one route: the routes table's primary key;
//   - notice ids that grow with commits (GET /notices pages by them):
//     notices numbered after their commit under the advisory lock
//     noticeLock (numberNotices);
//   - one plan of a node at a time across replicas: the row lock, taken
//     by rounds with SKIP LOCKED (PlanDue).
//
// A deadlock or a conflict found under a lock (errConflict) runs the
// transaction again from the start (inTx).
type Store struct {
	store.Rules
	db        *pgxpool.Pool
	cache     *nodeCache // nil: none
	planEvery time.Duration
	jobs      chan *reportJob // to the batch workers; nil: a transaction a report
	// batchTimeout bounds a batch's transaction, and then each of its
	// reports taken again alone.
	batchTimeout time.Duration
	// turn is the batch workers' one turn to take reports from jobs: a
	// worker holds it from its first report until its batch has
	// committed or run spill (Options.Spill).
	turn    chan struct{}
	spill   time.Duration
	stop    chan struct{}
	workers sync.WaitGroup
	// where is the -db value, its secrets redacted, for errors that must
	// say which database, and secrets scrubs them from the driver's words;
	// schema is the version this platform migrated the database to.
	where   string
	secrets scrubber
	schema  int
}

var _ store.Store = (*Store)(nil)

// Options are the PostgreSQL store's own settings.
type Options struct {
	// PlanEvery is the time between a node's plan rounds.
	PlanEvery time.Duration
	// Batch is the most reports one transaction takes (group commit:
	// under load, reports arriving together share a transaction and its
	// commit); 0 or 1: a transaction a report.
	Batch int
	// IdleInTx is how long the server keeps a session of this replica
	// that sits idle inside a transaction before it ends it, releasing
	// its row locks (the server's idle_in_transaction_session_timeout);
	// zero: defaultIdleInTx.
	IdleInTx time.Duration
	// BatchTimeout bounds a batch's transaction, and each of its reports
	// taken again alone if it fails; zero: half a request's time, so the
	// reports taken again have time left to answer.
	BatchTimeout time.Duration
	// Linger is how long a batch worker that took a report waits for more
	// before it starts its transaction (with Batch over 1); zero: not at
	// all, batches grow only when every worker is busy.
	Linger time.Duration
	// Workers is the most batches in flight at once (with Batch over 1);
	// zero: DefaultBatchWorkers. One runs at a time; another starts
	// beside those in flight only once each has run Spill, or is full.
	Workers int
	// Spill is how long a batch runs before another may start beside
	// it; zero: DefaultBatchSpill.
	Spill time.Duration
	// Cache is the most nodes this replica keeps a copy of, as it last
	// wrote them, to decide a quiet node's report without reading its row
	// (nodeCache); 0: none.
	Cache int
}

// Server-side bounds on every session, unless the -db URL sets them: a
// replica that froze mid-transaction (a stopped process, a paused VM, a
// partition: its socket stays open) releases its nodes' row locks after
// defaultIdleInTx, and a statement whose client gave up at its deadline
// (the server does not notice) ends at serverStatementTimeout instead of
// waiting on a lock, holding its own, for as long as the lock is held.
const (
	defaultIdleInTx        = 15 * time.Second
	serverStatementTimeout = store.RequestTimeout + 5*time.Second
)

// DefaultBatchWorkers is the most batches a replica has in flight at
// once, unless set, and DefaultBatchSpill how long one runs before
// another may start beside it.
//
// One batch at a time takes every report that arrived while the last
// ran: the fewest commits. At 100,000 nodes on one replica, one worker
// made 0.07 commits a report and cost 0.20–0.22 ms of platform and
// PostgreSQL CPU a report; two at once, 0.10 commits and 0.25–0.27 ms.
// But a batch can wait: on a node's row lock that another replica
// holds, for as long as that replica holds it (up to defaultIdleInTx if
// it froze), or on a slow disk's flush. Then the reports arriving behind
// it go into a batch of their own once it has run DefaultBatchSpill,
// some ten times a batch's usual time at that load (two round trips and
// a commit's flush, 3–6 ms), so a wait costs them that much, not the
// wait's length. A full batch (Options.Batch reports) lets the next
// start at once: more may be waiting than one batch at a time can take.
const (
	DefaultBatchWorkers = 2
	DefaultBatchSpill   = 50 * time.Millisecond
)

// Open connects to the database at url, brings its schema up to date and
// adds the seed's nodes the database does not hold yet.
func Open(ctx context.Context, url string, cfg store.Config, opt Options, seed *store.SeedFile) (*Store, error) {
	planEvery := opt.PlanEvery
	c, err := store.NewRules(cfg)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, dbError(url, err)
	}
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > 5*time.Second {
		pc.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	idle := opt.IdleInTx
	if idle <= 0 {
		idle = defaultIdleInTx
	}
	// Set once a session is open, not as startup parameters, which a
	// pooler in front of the server (PgBouncer) may refuse.
	var names, values []string
	for _, b := range []struct{ name, value string }{
		{"idle_in_transaction_session_timeout", strconv.FormatInt(idle.Milliseconds(), 10)},
		{"statement_timeout", strconv.FormatInt(serverStatementTimeout.Milliseconds(), 10)},
		// No lock_timeout from the database's or role's defaults: the waits
		// are bounded by the requests' deadlines and statement_timeout, and
		// a site's 20 ms failed replicas started at once (the migration's
		// advisory lock, the seed's rows) and answered 503 for a report
		// that waited a moment on its node.
		{"lock_timeout", "0"},
		// Every session plans each statement once (plan_cache_mode
		// force_generic_plan), unless the -db URL says otherwise. pgx prepares
		// each statement once a session, but the server's default then plans
		// it again on every run whose generic plan it guesses dearer than a
		// plan for the run's values: so for every statement that reads its rows
		// from unnest of arrays (the batches' UPDATE, INSERT and lock), whose
		// generic plan counts 100 rows where a run brings a handful. Planned
		// anew, such an UPDATE of 6 rows took 140–230 µs of the server's CPU;
		// planned once, 95–110 µs. The statements' generic plans are the ones
		// wanted: each reads by an index on its key (the primary keys, routes
		// by node, the due plans by time).
		{"plan_cache_mode", "force_generic_plan"},
		// The locks and conditional writes the Store's comment lists are
		// written for READ COMMITTED, PostgreSQL's default; a database or
		// role whose default is SERIALIZABLE failed the outbox's claims and
		// settles (single statements, each its own transaction) to
		// serialize, and notices waited out their leases and went twice.
		{"default_transaction_isolation", "read committed"},
	} {
		if _, set := pc.ConnConfig.RuntimeParams[b.name]; !set {
			names, values = append(names, b.name), append(values, b.value)
		}
	}
	// A reading is acknowledged once its commit is on disk: a session
	// that the database's or role's defaults give synchronous_commit off
	// commits with it on, unless the -db URL chose off itself. (With it
	// off, a server crash under two replicas' load lost 3 of 2,666
	// acknowledged readings.) Stronger settings (remote_apply) and local
	// are left as they are.
	_, syncSet := pc.ConnConfig.RuntimeParams["synchronous_commit"]
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SELECT set_config(name, value, false) FROM unnest($1::text[], $2::text[]) AS b (name, value)
			UNION ALL SELECT set_config('synchronous_commit', 'on', false) WHERE $3 AND current_setting('synchronous_commit') = 'off'`, names, values, !syncSet)
		return err
	}
	db, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, dbError(url, err)
	}
	p := &Store{Rules: c, db: db, cache: newNodeCache(opt.Cache), planEvery: planEvery, batchTimeout: cmp.Or(opt.BatchTimeout, store.RequestTimeout/2), spill: cmp.Or(opt.Spill, DefaultBatchSpill),
		where: RedactDSN(url), secrets: scrubber(dsnSecrets(url))}
	// Migrating and seeding a fleet's nodes: minutes at most.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	from, to, err := migrate(sctx, db)
	if err != nil {
		db.Close()
		var ce *pgconn.ConnectError
		if errors.As(err, &ce) {
			return nil, dbError(url, err)
		}
		return nil, p.dbErr(fmt.Errorf("schema: %w", err))
	}
	p.schema = to
	if err := checkColumns(sctx, db); err != nil {
		db.Close()
		return nil, p.dbErr(err)
	}
	if from != to {
		p.Log.Info("database schema migrated", "from", from, "to", to)
	}
	if seed != nil {
		if err := p.applySeed(sctx, seed, p.Now()); err != nil {
			db.Close()
			return nil, err
		}
	}
	if opt.Batch > 1 {
		p.jobs, p.stop = make(chan *reportJob), make(chan struct{})
		p.turn = make(chan struct{}, 1)
		p.turn <- struct{}{}
		for range cmp.Or(opt.Workers, DefaultBatchWorkers) {
			p.workers.Add(1)
			go p.batchWorker(opt.Batch, opt.Linger)
		}
	}
	return p, nil
}

// readyTimeout bounds Ready: a load balancer's probe waits about as long.
const readyTimeout = 2 * time.Second

// Ready reports whether this replica can serve: its database answers
// within readyTimeout, its schema is still the version this platform
// migrated it to, and its tables hold every column the platform uses. A
// newer platform migrating the database beside this one makes it not
// ready: replicas of an older version must not serve a migrated
// database. The error names the database, its secrets redacted.
func (p *Store) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var v int
	if err := p.db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&v); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v: %w", readyTimeout, err)
		}
		return p.dbErr(classify(err))
	}
	if v != p.schema {
		return fmt.Errorf("database %s: schema version %d, this platform's is %d: a platform of another version migrated it; stop this replica, run that version", p.where, v, p.schema)
	}
	if err := checkColumns(ctx, p.db); err != nil {
		return p.dbErr(err)
	}
	return nil
}

// dbErr is err from the database, or about it: the database named, its
// secrets scrubbed from the driver's words.
func (p *Store) dbErr(err error) error {
	return fmt.Errorf("database %s: %s", p.where, p.secrets.scrub(err.Error()))
}

// Outbox is the store's outbox, for its notifier; nil without a
// dispatch.
func (p *Store) Outbox() store.OutboxStore {
	if p.Dispatch == nil {
		return nil
	}
	return &pgOutbox{db: p.db}
}

// Close stops the store's batch workers and closes its connections.
func (p *Store) Close() {
	if p.stop != nil {
		close(p.stop)
		p.workers.Wait()
	}
	p.db.Close()
}
