package pgstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
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
//     by rounds with SKIP LOCKED (PlanRound).
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
}

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
	} {
		if _, set := pc.ConnConfig.RuntimeParams[b.name]; !set {
			names, values = append(names, b.name), append(values, b.value)
		}
	}
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SELECT set_config(name, value, false) FROM unnest($1::text[], $2::text[]) AS b (name, value)`, names, values)
		return err
	}
	db, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, dbError(url, err)
	}
	p := &Store{Rules: c, db: db, cache: newNodeCache(opt.Cache), planEvery: planEvery, batchTimeout: cmp.Or(opt.BatchTimeout, store.RequestTimeout/2), spill: cmp.Or(opt.Spill, DefaultBatchSpill)}
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
		return nil, fmt.Errorf("database schema: %s", scrubber(dsnSecrets(url)).scrub(err.Error()))
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

func (p *Store) applySeed(ctx context.Context, s *store.SeedFile, now time.Time) error {
	byNode, err := store.CheckSeed(s)
	if err != nil {
		return err
	}
	// A few hundred nodes a transaction: a fleet's seed loads in seconds,
	// and the nodes the database holds already are skipped in one query.
	for chunk := range slices.Chunk(s.Nodes, 500) {
		ids := make([]string, len(chunk))
		for i, sn := range chunk {
			ids[i] = sn.ID
		}
		known := map[string]bool{}
		rows, err := p.db.Query(ctx, `SELECT id FROM nodes WHERE role IS NOT NULL AND id = ANY($1)`, ids)
		if err != nil {
			return classify(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return classify(err)
			}
			known[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return classify(err)
		}
		if len(known) == len(chunk) {
			continue
		}
		err = p.inTx(ctx, func(tx pgx.Tx) error {
			created, err := p.seedNew(ctx, tx, chunk, known, byNode, now)
			if err != nil {
				return err
			}
			for _, sn := range chunk {
				if known[sn.ID] || created[sn.ID] {
					continue
				}
				n, err := p.lockNode(ctx, tx, sn.ID, true)
				if err != nil {
					return fmt.Errorf("route table: node %s: %w", sn.ID, err)
				}
				if n.Info.Role != 0 {
					continue // the database holds it: state wins
				}
				if err := p.SeedNode(n.Node, sn, byNode[sn.ID], now); err != nil {
					return err
				}
				if err := p.saveNode(ctx, tx, n, now); err != nil {
					return fmt.Errorf("route table: node %s: %w", sn.ID, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// seedOneByOne has applySeed seed every node one at a time, as it
// seeds a node that already has a row: for a test, the reference
// seedNew's writes are compared with.
var seedOneByOne = false

// seedNew seeds the nodes of chunk the database holds no row of (nor
// known: those with a role), in tx, and returns them by ID: their rows
// inserted in one statement, their routes written (one round trip a
// node with routes), their rows written in one more. It writes what
// lockNode, SeedNode and saveNode write for a node new to the database,
// which take it one node at a time, at a few round trips a node. A node
// whose row exists (a report created it; a replica
// seeding at the same time inserted it) is not returned, and is left to
// the caller, to be taken that way.
func (p *Store) seedNew(ctx context.Context, tx pgx.Tx, chunk []routing.Node, known map[string]bool, byNode map[string][]routing.Route, now time.Time) (map[string]bool, error) {
	if seedOneByOne {
		return nil, nil
	}
	fresh := map[string]*pgNode{}
	var ids, states []string
	for _, sn := range chunk {
		if known[sn.ID] {
			continue
		}
		nd, b, err := p.freshNode(sn.ID)
		if err != nil {
			return nil, err
		}
		fresh[sn.ID] = &pgNode{Node: nd, state: b, bodies: map[string][]byte{}, created: true}
		ids, states = append(ids, sn.ID), append(states, string(b))
	}
	if len(ids) == 0 {
		return nil, nil
	}
	// As lockNode's INSERT: ON CONFLICT DO NOTHING waits for a
	// transaction inserting the same id, and returns no row for it.
	rows, err := tx.Query(ctx, `INSERT INTO nodes (id, state) SELECT id, state::json FROM unnest($1::text[], $2::text[]) AS u (id, state)
		ON CONFLICT (id) DO NOTHING RETURNING id`, ids, states)
	created := map[string]bool{}
	var id string
	if err := eachRow(rows, err, []any{&id}, func() error { created[id] = true; return nil }); err != nil {
		return nil, err
	}
	var written []*pgNode
	for _, sn := range chunk { // the seed's order, as the caller's
		n := fresh[sn.ID]
		if n == nil || !created[sn.ID] {
			continue
		}
		if err := p.SeedNode(n.Node, sn, byNode[sn.ID], now); err != nil {
			return nil, err
		}
		if err := p.saveRoutes(ctx, tx, n, now); err != nil {
			return nil, fmt.Errorf("route table: node %s: %w", sn.ID, err)
		}
		written = append(written, n)
	}
	if err := p.updateRows(ctx, tx, written, now); err != nil {
		return nil, fmt.Errorf("route table: %w", err)
	}
	return created, nil
}

// pgNode is a node as loaded in a transaction, with what is needed to
// write back only what changed.
type pgNode struct {
	*store.Node
	state   []byte            // the state column as loaded
	bodies  map[string][]byte // each live route's body as loaded
	created bool              // this transaction created the node's row
	version int64             // the row's version as this transaction wrote it; 0 before
}

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
// (ErrUnsaved, 500); the database unreachable, restarting or out of time
// is ErrUnavailable (503: the agent retries). The platform's own errors
// pass as they are.
func classify(err error) error {
	if err == nil {
		return nil
	}
	for _, e := range []error{store.ErrUnknown, store.ErrUnknownNode, store.ErrBadInput, store.ErrNotAdmit, store.ErrDuplicate, store.ErrStale, store.ErrUnsaved} {
		if errors.Is(err, e) {
			return err
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:2] {
		case "08", "57", "53", "40": // connection, operator intervention (shutdown), resources, conflicts
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return fmt.Errorf("%w: %w", store.ErrUnsaved, err)
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}

// lockNode locks node id's row and then loads it, creating it if asked.
//
// The lock comes first, in a statement of its own, and what the
// transaction will change (the node's state, its live routes) is read
// after it, each in a later statement. At READ COMMITTED a statement that
// waited for a row lock re-reads only the row it locked: a join of the
// node with its routes under FOR UPDATE would return the node as the
// last holder of the lock left it with its routes as they were before
// the wait, and a write-back of those routes would undo what that holder
// committed (its charges, closures and admissions). A statement begun
// after the lock is granted sees everything committed before it.
//
// Whether the node is new is what the INSERT did (its RETURNING row),
// never what a SELECT saw: two first readings at once both see no row,
// and only one inserts it; the other waits for that one's commit and
// then loads the row it committed.
func (p *Store) lockNode(ctx context.Context, tx pgx.Tx, id string, create bool) (*pgNode, error) {
	state, err := lockRow(ctx, tx, id)
	created := false
	if errors.Is(err, pgx.ErrNoRows) && create {
		_, b, ferr := p.freshNode(id)
		if ferr != nil {
			return nil, ferr
		}
		// ON CONFLICT DO NOTHING waits for a transaction inserting the
		// same id and, if that one commits, inserts nothing: RETURNING
		// then gives no row and the node is locked as that one left it.
		err = tx.QueryRow(ctx, `INSERT INTO nodes (id, state) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING RETURNING true`, id, b).Scan(&created)
		switch {
		case err == nil: // inserted: the row is this transaction's, locked
			state = b
		case errors.Is(err, pgx.ErrNoRows):
			state, err = lockRow(ctx, tx, id)
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("node %q: %w", id, store.ErrUnknownNode)
	}
	if err != nil {
		return nil, err
	}
	n, err := p.loadNode(ctx, tx, id, state)
	if err != nil {
		return nil, err
	}
	n.created = created
	return n, nil
}

// freshNode is node id as new to the database, and the state its row
// is inserted with.
func (p *Store) freshNode(id string) (*store.Node, []byte, error) {
	n, err := p.NewNode(id)
	if err != nil {
		return nil, nil, err
	}
	b, err := encodeState(n)
	if err != nil {
		return nil, nil, err
	}
	return n, b, nil
}

// lockRow locks node id's row (FOR UPDATE) and returns its state, as the
// lock's last holder committed it; pgx.ErrNoRows if there is no such
// node.
func lockRow(ctx context.Context, tx pgx.Tx, id string) ([]byte, error) {
	var state []byte
	err := tx.QueryRow(ctx, `SELECT state FROM nodes WHERE id = $1 FOR UPDATE`, id).Scan(&state)
	return state, err
}

// addRoute adds a live route as stored. A route another node's move
// relies on counts as used from that instant.
func (n *pgNode) addRoute(body []byte, relied *time.Time) error {
	var rt store.Route
	if err := json.Unmarshal(body, &rt); err != nil {
		return fmt.Errorf("node %s: stored route: %w: %w", n.Info.ID, store.ErrUnsaved, err)
	}
	n.bodies[rt.Route.ID] = body
	if relied != nil {
		rt.ReliedOn = *relied
	}
	n.Routes[rt.Route.ID] = &rt
	return nil
}

// loadNode decodes a node's state and loads its live routes, for reads.
func (p *Store) loadNode(ctx context.Context, tx pgx.Tx, id string, state []byte) (*pgNode, error) {
	nd, err := p.DecodeNode(state)
	if err != nil {
		return nil, fmt.Errorf("node %s: stored state: %w: %w", id, store.ErrUnsaved, err)
	}
	n := &pgNode{Node: nd, state: state, bodies: map[string][]byte{}}
	if err := loadRoutes(ctx, tx, id, n); err != nil {
		return nil, err
	}
	return n, nil
}

// addRoutes adds the live routes of n as stored.
func (n *pgNode) addRoutes(rs []storedRoute) error {
	for _, r := range rs {
		if err := n.addRoute(r.body, r.relied); err != nil {
			return err
		}
	}
	n.Info.LiveUsers = store.LiveUsers(n.Node)
	return nil
}

// loadRoutes loads the live routes of node id into n.
func loadRoutes(ctx context.Context, tx pgx.Tx, id string, n *pgNode) error {
	rows, err := tx.Query(ctx, `SELECT body, relied_on FROM routes WHERE node = $1 AND closed_at IS NULL`, id)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var body []byte
		var relied *time.Time
		if err := rows.Scan(&body, &relied); err != nil {
			return err
		}
		if err := n.addRoute(body, relied); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	n.Info.LiveUsers = store.LiveUsers(n.Node)
	return nil
}

// saveNode writes back what changed in n: the node's row (its version
// goes up by one), new and changed routes, closures with the routes the
// moves rely on, and the event; now is the time the transaction decided
// at.
func (p *Store) saveNode(ctx context.Context, tx pgx.Tx, n *pgNode, now time.Time) error {
	if err := p.saveRoutes(ctx, tx, n, now); err != nil {
		return err
	}
	if err := p.addEvents(ctx, tx, []*pgNode{n}); err != nil {
		return err
	}
	return p.updateRows(ctx, tx, []*pgNode{n}, now)
}

// saveRoutes writes back what changed in n's routes: new and changed
// routes, closures with the routes the moves rely on, all in one round
// trip (a pipeline, which the server runs statement after statement).
//
// Every route the round closes or relies on is locked first, in ID order
// (so two nodes' rounds never deadlock), and what the plan relied on is
// checked to still hold, as locked: the alternative is open, and a route
// closed as unused was not made another move's alternative meanwhile. The
// writes go in the same pipeline, after the lock: if a check fails, the
// transaction (errConflict) is rolled back, writes and all.
func (p *Store) saveRoutes(ctx context.Context, tx pgx.Tx, n *pgNode, now time.Time) error {
	id := n.Info.ID
	var b pgx.Batch
	var lockIDs []string
	alone := len(n.Closing) == 1 && len(n.Relied) == 0
	if alone {
		// One route to lock: its UPDATE locks it, and checks what the
		// lock would (closeAlone).
		if err := queueCloseAlone(&b, n, p.Config.Policy.WithDefaults().UnusedAfter, now); err != nil {
			return err
		}
	}
	if len(n.Closing) > 0 && !alone {
		for _, c := range n.Closing {
			lockIDs = append(lockIDs, c.Action.Route.ID)
		}
		for _, r := range n.Relied {
			lockIDs = append(lockIDs, r.ID)
		}
		slices.Sort(lockIDs)
		b.Queue(`SELECT id, closed_at IS NOT NULL, relied_on, last_traffic FROM routes WHERE id = ANY($1) ORDER BY id FOR UPDATE`, lockIDs)
		for _, r := range n.Relied {
			b.Queue(`UPDATE routes SET relied_on = $2 WHERE id = $1`, r.ID, now)
		}
		for _, c := range n.Closing {
			body, err := json.Marshal(store.Route{Route: c.Action.Route, Session: c.Session, Earned: c.Earned})
			if err != nil {
				return fmt.Errorf("node %s: route %s: %w: %w", id, c.Action.Route.ID, store.ErrUnsaved, err)
			}
			action, err := json.Marshal(c.Action)
			if err != nil {
				return fmt.Errorf("node %s: route %s: %w: %w", id, c.Action.Route.ID, store.ErrUnsaved, err)
			}
			b.Queue(`UPDATE routes SET closed_at = $2, closed_by = $3, body = $4 WHERE id = $1 AND closed_at IS NULL`,
				c.Action.Route.ID, c.At, action, body)
		}
	}
	// Live routes: new ones inserted, changed ones (price, traffic,
	// earnings) updated.
	var writes []routeWrite
	for _, rid := range slices.Sorted(maps.Keys(n.Routes)) {
		rt := n.Routes[rid]
		body, err := json.Marshal(rt)
		if err != nil {
			return fmt.Errorf("node %s: route %s: %w: %w", id, rid, store.ErrUnsaved, err)
		}
		old, had := n.bodies[rid]
		switch {
		case !had:
			b.Queue(`INSERT INTO routes (id, node, user_id, key, country, price, last_traffic, body)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING`,
				rid, id, rt.Route.User, rt.Route.Key, rt.Route.Country, int64(rt.Route.Price), nullTime(rt.Route.LastTraffic), body)
			writes = append(writes, routeWrite{rid, true})
		case string(old) != string(body):
			// Only a live route, and only as this transaction loaded it
			// (a charge adds to the earnings it read): a route closed, or
			// charged, by a transaction this one did not see is a
			// conflict, run again from the start.
			b.Queue(`UPDATE routes SET price = $2, last_traffic = $3, body = $4 WHERE id = $1 AND closed_at IS NULL AND body::text = $5`,
				rid, int64(rt.Route.Price), nullTime(rt.Route.LastTraffic), body, string(old))
			writes = append(writes, routeWrite{rid, false})
		}
	}
	if b.Len() == 0 {
		return nil
	}
	br := tx.SendBatch(ctx, &b)
	var err error
	if alone {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("node %s: route %s was closed, made another move's alternative or carried traffic meanwhile: %w", id, n.Closing[0].Action.Route.ID, errConflict)
		}
	}
	if err == nil {
		err = p.checkRoutes(br, n, lockIDs, writes, now)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// queueCloseAlone queues the closure of n's one route to close, when its
// plan relies on no other route: one UPDATE, which locks the route and
// writes it only if, as locked, it is still open, not another move's
// alternative since unusedAfter before now (unless the closure itself is
// a move), and, for a closure as unused, carried no traffic since then:
// what saveRoutes checks under the lock of several routes.
func queueCloseAlone(b *pgx.Batch, n *pgNode, unusedAfter time.Duration, now time.Time) error {
	c := n.Closing[0]
	body, err := json.Marshal(store.Route{Route: c.Action.Route, Session: c.Session, Earned: c.Earned})
	if err != nil {
		return fmt.Errorf("node %s: route %s: %w: %w", n.Info.ID, c.Action.Route.ID, store.ErrUnsaved, err)
	}
	action, err := json.Marshal(c.Action)
	if err != nil {
		return fmt.Errorf("node %s: route %s: %w: %w", n.Info.ID, c.Action.Route.ID, store.ErrUnsaved, err)
	}
	_, relies := store.ReliesOn(c.Action)
	b.Queue(`UPDATE routes SET closed_at = $2, closed_by = $3, body = $4
		WHERE id = $1 AND closed_at IS NULL
			AND ($5 OR relied_on IS NULL OR relied_on <= $6)
			AND (NOT $7 OR last_traffic IS NULL OR last_traffic <= $6)`,
		c.Action.Route.ID, c.At, action, body, relies, now.Add(-unusedAfter), unusedClosure(c.Action))
	return nil
}

// routeWrite is a live route saveRoutes writes: inserted (new) or
// updated.
type routeWrite struct {
	rid string
	new bool
}

// checkRoutes reads the results of saveRoutes' pipeline, in its order,
// and checks them; lockIDs are the routes it locked (none: no closure),
// writes the live routes it inserted (new) or updated.
func (p *Store) checkRoutes(br pgx.BatchResults, n *pgNode, lockIDs []string, writes []routeWrite, now time.Time) error {
	id := n.Info.ID
	if len(lockIDs) > 0 {
		type lockedRoute struct {
			closed        bool
			relied, trafc *time.Time
		}
		locked := map[string]lockedRoute{}
		rows, err := br.Query()
		var rid string
		var lr lockedRoute
		if err := eachRow(rows, err, []any{&rid, &lr.closed, &lr.relied, &lr.trafc}, func() error {
			locked[rid] = lr
			lr = lockedRoute{}
			return nil
		}); err != nil {
			return err
		}
		unusedAfter := p.Config.Policy.WithDefaults().UnusedAfter
		for _, r := range n.Relied {
			if lr, ok := locked[r.ID]; !ok || lr.closed {
				return fmt.Errorf("node %s: the alternative %s was closed meanwhile: %w", id, r.ID, errConflict)
			}
		}
		for _, c := range n.Closing {
			rid := c.Action.Route.ID
			lr, ok := locked[rid]
			if !ok || lr.closed {
				// Closed by a transaction this one did not see: never
				// close a route twice.
				return fmt.Errorf("node %s: route %s was closed meanwhile: %w", id, rid, errConflict)
			}
			if _, relies := store.ReliesOn(c.Action); !relies && lr.relied != nil && now.Sub(*lr.relied) < unusedAfter {
				return fmt.Errorf("node %s: route %s became another move's alternative meanwhile: %w", id, rid, errConflict)
			}
			// An unused closure holds only if the route is still unused
			// as stored, under its row lock: a charge committed after the
			// plan read the route makes it in use.
			if unusedClosure(c.Action) && lr.trafc != nil && now.Sub(*lr.trafc) < unusedAfter {
				return fmt.Errorf("node %s: route %s carried traffic meanwhile: %w", id, rid, errConflict)
			}
		}
		for range n.Relied {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		for _, c := range n.Closing {
			tag, err := br.Exec()
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("node %s: route %s was closed meanwhile: %w", id, c.Action.Route.ID, errConflict)
			}
		}
	}
	for _, w := range writes {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		switch {
		case w.new && tag.RowsAffected() == 0:
			return fmt.Errorf("route %s: another route holds its ID: %w", w.rid, store.ErrBadInput)
		case !w.new && tag.RowsAffected() != 1:
			return fmt.Errorf("node %s: route %s changed meanwhile: %w", id, w.rid, errConflict)
		}
	}
	return nil
}

// addEvents appends the events of nodes (those that have one) to their
// event lists, in one statement.
func (p *Store) addEvents(ctx context.Context, tx pgx.Tx, nodes []*pgNode) error {
	sql, args, err := eventsInsert(nodes)
	if err != nil || sql == "" {
		return err
	}
	_, err = tx.Exec(ctx, sql, args...)
	return err
}

// eventsInsert is the statement that appends the events of nodes (those
// that have one) to their event lists, with its arguments; "" if no node
// has one.
func eventsInsert(nodes []*pgNode) (string, []any, error) {
	args, err := eventsArgs(nodes)
	if err != nil || args == nil {
		return "", nil, err
	}
	return eventsSQL(1), args, nil
}

// eventsArgs are the arguments of eventsSQL for the events of nodes
// (those that have one); nil if none has one.
func eventsArgs(nodes []*pgNode) ([]any, error) {
	var ids, kinds, bodies []string
	var ats []time.Time
	for _, n := range nodes {
		if n.Event == nil {
			continue
		}
		b, err := json.Marshal(n.Event)
		if err != nil {
			return nil, fmt.Errorf("node %s: event: %w: %w", n.Info.ID, store.ErrUnsaved, err)
		}
		ids, kinds, ats, bodies = append(ids, n.Info.ID), append(kinds, string(n.Event.Kind)), append(ats, n.Event.At), append(bodies, string(b))
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return []any{ids, kinds, ats, bodies}, nil
}

// eventsSQL is the INSERT of events whose four arguments (eventsArgs)
// start at $from.
func eventsSQL(from int) string {
	return fmt.Sprintf(`INSERT INTO events (node, kind, at, body)
		SELECT u.node, u.kind, u.at, u.body::jsonb FROM unnest($%d::text[], $%d::text[], $%d::timestamptz[], $%d::text[]) WITH ORDINALITY AS u (node, kind, at, body, i)
		ORDER BY u.i`, from, from+1, from+2, from+3)
}

// updateRows writes nodes' rows (their versions go up by one), each
// locked by this transaction, in one statement.
func (p *Store) updateRows(ctx context.Context, tx pgx.Tx, nodes []*pgNode, now time.Time) error {
	if len(nodes) == 0 {
		return nil
	}
	sql, args, err := p.rowsUpdate(nodes, false, now)
	if err != nil {
		return err
	}
	versions, err := scanVersions(tx.Query(ctx, sql, args...))
	if err != nil {
		return rowsMissed(err)
	}
	return setVersions(nodes, versions)
}

// rowsUpdate is the statement that writes nodes' rows, each locked by
// this transaction, with its arguments, and with events, their events
// (eventsSQL, in the same statement). It returns each row written with
// its new version, and fails (rowsMissed) unless it wrote every one of
// them: the statement itself fails, so that a transaction whose COMMIT
// was sent with it (takeBatchOnce) never commits a batch with a node
// unwritten.
func (p *Store) rowsUpdate(nodes []*pgNode, events bool, now time.Time) (string, []any, error) {
	ids, roles, countries := make([]string, len(nodes)), make([]*string, len(nodes)), make([]string, len(nodes))
	states, readings, overloaded := make([]string, len(nodes)), make([]int64, len(nodes)), make([]bool, len(nodes))
	next := make([]*time.Time, len(nodes)) // NULL: nothing to plan until a change to the node
	due := now.Add(p.planEvery)
	for i, n := range nodes {
		state, err := encodeState(n.Node)
		if err != nil {
			return "", nil, err
		}
		ids[i], countries[i], states[i] = n.Info.ID, n.Info.Country, string(state)
		readings[i], overloaded[i] = n.Readings, n.Tracker.Overloaded()
		if !p.Quiet(n.Node, now) {
			next[i] = &due
		}
		if n.Info.Role != 0 {
			s := n.Info.Role.String()
			roles[i] = &s
		}
	}
	args := []any{ids, roles, countries, states, readings, overloaded, next, int64(len(nodes))}
	with := "WITH "
	if events {
		eargs, err := eventsArgs(nodes)
		if err != nil {
			return "", nil, err
		}
		if eargs != nil {
			with = "WITH added AS (" + eventsSQL(len(args)+1) + "),\n"
			args = append(args, eargs...)
		}
	}
	// The count is checked by a division by zero: 1 / 0 when a row was
	// not written (its error, 22012, is what rowsMissed looks for).
	return with + `w AS (
			UPDATE nodes AS n SET role = u.role, country = u.country, state = u.state::json, readings = u.readings,
				overloaded = u.overloaded, next_plan_at = u.next_plan_at, version = n.version + 1, updated_at = now()
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::boolean[], $7::timestamptz[])
				AS u (id, role, country, state, readings, overloaded, next_plan_at)
			WHERE n.id = u.id
			RETURNING n.id, n.version)
		SELECT w.id, w.version FROM (SELECT 1 / (CASE WHEN count(*) = $8 THEN 1 ELSE 0 END) FROM w) AS all_written (ok) CROSS JOIN w`,
		args, nil
}

// rowsMissed maps the error of rowsUpdate's statement that says a row
// was not written to errConflict (the transaction is run again).
func rowsMissed(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "22012" {
		return fmt.Errorf("a node's row was not written: %w", errConflict)
	}
	return err
}

// setVersions gives each of nodes its row's version as written.
func setVersions(nodes []*pgNode, versions map[string]int64) error {
	if len(versions) != len(nodes) {
		return fmt.Errorf("%d of %d nodes' rows written: %w", len(versions), len(nodes), errConflict)
	}
	for _, n := range nodes {
		n.version = versions[n.Info.ID]
	}
	return nil
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

// scanVersions reads the rows of an UPDATE of nodes … RETURNING n.id,
// n.version: each node written, with its row's new version.
func scanVersions(rows pgx.Rows, err error) (map[string]int64, error) {
	out := map[string]int64{}
	var id string
	var v int64
	err = eachRow(rows, err, []any{&id, &v}, func() error {
		out[id] = v
		return nil
	})
	return out, err
}

// noticeLock is the advisory lock a numbering of notices takes, until
// its transaction ends (numberNotices).
const noticeLock = 0x6e6f6b69746e6f74 // "nokitnot"

// sendNotices inserts the notices of the nodes the transaction reported
// (at most one a node), unnumbered (numberNotices numbers them once
// committed), with their outbox rows: the statements of noticeRounds, in
// order, in one pipeline (queueNotices).
func (p *Store) sendNotices(ctx context.Context, tx pgx.Tx, nodes []*pgNode) error {
	rounds, err := p.noticeRounds(nodes, p.Now())
	if err != nil {
		return err
	}
	if len(rounds) == 0 {
		return nil
	}
	var b pgx.Batch
	queueNotices(&b, rounds)
	br := tx.SendBatch(ctx, &b)
	err = p.readNotices(br, rounds)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// queueNotices queues the statements of rounds on b, between planEachRun
// and planOnce.
func queueNotices(b *pgx.Batch, rounds []noticeRound) {
	if len(rounds) == 0 {
		return
	}
	b.Queue(planEachRun)
	for _, r := range rounds {
		b.Queue(r.sql, r.args...)
	}
	b.Queue(planOnce)
}

// readNotices reads, from br, the results of what queueNotices queued,
// and settles each round.
func (p *Store) readNotices(br pgx.BatchResults, rounds []noticeRound) error {
	if len(rounds) == 0 {
		return nil
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	for _, r := range rounds {
		inserted, err := scanInserted(br.Query())
		if err != nil {
			return err
		}
		p.settleNotices(r, inserted)
	}
	_, err := br.Exec()
	return err
}

// planEachRun has the transaction's statements planned on every run,
// from there on, on the tables as they are then (plan_cache_mode
// force_custom_plan); planOnce goes back to the session's setting (by
// default force_generic_plan: planned once, at the session's first run).
//
// The notice inserts run between them. A session runs them rarely (one
// notice a node an hour), so a plan of its own is cheap; and notices grows
// from empty, a few notices a minute: a plan made once, on the table as
// autovacuum last analyzed it (empty, in a new database's first minutes),
// reads every notice on every insert (a sequential scan; 20,000 notices,
// 3 ms a statement) until its next ANALYZE, which for a table that only
// grows comes after a tenth more rows. A plan made at each run sees the
// table's size as it is.
const (
	planEachRun = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`
	planOnce    = `SET LOCAL plan_cache_mode TO DEFAULT`
)

// noticeRound is one statement of noticeRounds: the notices of nodes, at
// most one a node, and outbox rows.
type noticeRound struct {
	nodes []*pgNode // those with a notice in this round
	sql   string
	args  []any
}

// noticeRounds are the statements that insert the notices of nodes (at
// most one a node: a node's two notices, of its two readings in one
// batch, each in a node of its own, go one statement each, so the second
// sees the first), each with the outbox rows of what the transaction
// decided for its nodes: a notice's only if the notice goes in, in the
// same transaction (a notice counted is delivered, one rolled back is
// never sent); the end of an overload's, when asked for, in the first.
// Each returns the nodes whose notice went in (scanInserted); none is
// needed when there is nothing to insert.
//
// The hour is decided here too, not only by the tracker: no notice goes
// into the table within NoticeEvery of the node's last one (the node's
// row lock, held, orders that node's notices). A notice refused so is
// taken out of its node by settleNotices.
func (p *Store) noticeRounds(nodes []*pgNode, now time.Time) ([]noticeRound, error) {
	var rounds []noticeRound
	var ends []store.Delivery
	var pending []*pgNode
	for _, n := range nodes {
		if n == nil {
			continue
		}
		if n.Notice != nil {
			pending = append(pending, n)
		}
		if d, ok, err := p.endDeliveryOf(n, now); err != nil {
			return nil, err
		} else if ok {
			ends = append(ends, d)
		}
	}
	for len(pending) > 0 || len(ends) > 0 {
		var ids, bodies []string
		var ats, cuts []time.Time
		var these []*pgNode
		seen := map[string]bool{}
		rest := pending[:0:0]
		var out outboxRows
		for _, d := range ends {
			out.add(d, d.At, false)
		}
		ends = nil
		for _, n := range pending {
			id := n.Info.ID
			if seen[id] {
				rest = append(rest, n)
				continue
			}
			seen[id] = true
			b, err := json.Marshal(n.Notice)
			if err != nil {
				return nil, fmt.Errorf("node %s: notice: %w: %w", id, store.ErrUnsaved, err)
			}
			every := n.Tracker.Limits().NoticeEvery
			if every <= 0 {
				every = overload.DefaultLimits().NoticeEvery
			}
			ids, bodies, ats, cuts = append(ids, id), append(bodies, string(b)), append(ats, n.Notice.At), append(cuts, n.Notice.At.Add(-every))
			these = append(these, n)
			if d, ok, err := p.noticeDeliveryOf(n, now); err != nil {
				return nil, err
			} else if ok {
				out.add(d, n.Notice.At, true)
			}
		}
		if ids == nil {
			ids, bodies, ats, cuts = []string{}, []string{}, []time.Time{}, []time.Time{}
		}
		rounds = append(rounds, noticeRound{nodes: these, sql: noticeInsert,
			args: append([]any{ids, ats, bodies, cuts}, out.args()...)})
		pending = rest
	}
	return rounds, nil
}

// noticeInsert inserts notices ($1 nodes, $2 times, $3 bodies), each only
// if its node has none after its cut ($4), with their outbox rows (from
// $5), and returns the nodes whose notice went in.
//
// The node's latest notice is a scalar subquery, not NOT EXISTS, which
// the server turns into a join: planned on a table it takes for nearly
// empty, a hash join over all of notices. The subquery, a subplan run
// per row, reads notices_by_node's last entry for the node, unless the
// table's statistics say it is empty; it runs between planEachRun and
// planOnce, so it is planned on the table as it is.
var noticeInsert = `WITH sent AS (
		INSERT INTO notices (node, at, body)
		SELECT u.node, u.at, u.body::jsonb FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::timestamptz[]) WITH ORDINALITY AS u (node, at, body, cut, i)
		WHERE coalesce((SELECT max(at) FROM notices WHERE node = u.node), '-infinity') <= u.cut
		ORDER BY u.i
		RETURNING node),
	outbox AS (` + outboxInsert(5, `NOT d.of_notice OR d.node IN (SELECT node FROM sent)`) + `)
	SELECT node FROM sent`

// scanInserted reads what a statement of noticeRounds returns: the nodes
// whose notice went in.
func scanInserted(rows pgx.Rows, err error) (map[string]bool, error) {
	inserted := map[string]bool{}
	var id string
	err = eachRow(rows, err, []any{&id}, func() error {
		inserted[id] = true
		return nil
	})
	return inserted, err
}

// settleNotices takes the notices of r that did not go in, inserted
// naming those that did, out of their nodes.
func (p *Store) settleNotices(r noticeRound, inserted map[string]bool) {
	for _, n := range r.nodes {
		if !inserted[n.Info.ID] {
			p.Log.Warn("notice not sent: the node had one within the hour", "node", n.Info.ID, "at", n.Notice.At)
			n.Notice = nil
		}
	}
}

// numberNotices numbers the notices committed and not numbered yet, in
// one transaction that takes noticeLock first. GET /notices pages by the
// number, so a notice must never become visible after one with a higher
// number. A sequence taken in the deciding transaction does not give
// that (one may take 5, another 6 and commit first: a client that paged
// past 6 never sees 5); holding a lock from the number to the commit
// does, but made every report's transaction with a notice wait for the
// commit of the one before. So the notices go in unnumbered, and are
// numbered afterwards by this short transaction: under the lock, which
// the server releases only after the commit is visible, each numbering
// sees every one before it committed, and its numbers are above theirs
// and visible at once. A notice committed after a numbering read the
// table is numbered by the next, above: one committed later is never
// numbered below one already visible.
//
// Numbering is left to the readers: GET /notices numbers before it
// reads, so it lists every notice committed before it, and each plan
// round numbers too, so the numbers keep up without readers. A report
// pays nothing for it.
func (p *Store) numberNotices(ctx context.Context) error {
	var waiting bool
	if err := p.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM notices WHERE num IS NULL)`).Scan(&waiting); err != nil {
		return classify(err)
	}
	if !waiting {
		return nil
	}
	return p.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(noticeLock)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `WITH waiting AS (SELECT id FROM notices WHERE num IS NULL ORDER BY id FOR UPDATE),
				numbered AS (SELECT id, nextval('notice_numbers') AS num FROM waiting)
			UPDATE notices n SET num = numbered.num FROM numbered WHERE n.id = numbered.id`)
		return err
	})
}

// unusedClosure reports whether a closes a route for moving no traffic
// (on an overloaded exit, or draining a paused node).
func unusedClosure(a routing.Action) bool {
	return a.Reason == routing.ReasonUnused || a.Reason == routing.ReasonDrain
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// pgAlternatives answers routing's Alternatives by a query, in the
// round's transaction: the cheapest live route of the same user and key
// through another node of the same country, at the same price or less.
// Prices are the sessions' prices when each route's node was last saved
// (a node reports every 30 s, and a price drop reaches a session only
// after hours). The routes the round's moves relied on are kept in n.
type pgAlternatives struct {
	ctx context.Context
	tx  pgx.Tx
	n   *store.Node
	err error
}

var (
	_ store.Store          = (*Store)(nil)
	_ routing.Alternatives = (*pgAlternatives)(nil)
)

func (a *pgAlternatives) Alternative(r routing.Route) (routing.Route, bool) {
	if a.err != nil {
		return routing.Route{}, false
	}
	var body []byte
	err := a.tx.QueryRow(a.ctx, `SELECT body FROM routes
		WHERE user_id = $1 AND key = $2 AND country = $3 AND price <= $4 AND node <> $5 AND id <> $6 AND closed_at IS NULL
		ORDER BY price, id LIMIT 1`, r.User, r.Key, r.Country, int64(r.Price), r.Node, r.ID).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return routing.Route{}, false
	}
	var rt store.Route
	if err == nil {
		err = json.Unmarshal(body, &rt)
	}
	if err != nil {
		a.err = err
		return routing.Route{}, false
	}
	return rt.Route, routing.IsAlternative(r, rt.Route)
}

// Record: the closures and reliance are written by saveNode, after Plan.
func (a *pgAlternatives) Record(time.Time, routing.Action) {}

// ReliedOn answers for the planned node's own routes, as loaded (the
// relied_on column).
func (a *pgAlternatives) ReliedOn(r routing.Route) time.Time {
	if rt := a.n.Routes[r.ID]; rt != nil {
		return rt.ReliedOn
	}
	return time.Time{}
}

// logClosures logs the closures of nodes, committed.
func (p *Store) logClosures(nodes ...*pgNode) {
	for _, n := range nodes {
		if n == nil {
			continue
		}
		for _, c := range n.Closing {
			p.LogClosure(n.Info.ID, c.Action)
		}
	}
}

// Report takes a reading of node id (NodeStore.Report). With batches
// (Options.Batch over 1) it waits for a batch worker to take it with
// the others arriving (batch.go); else it is taken alone, decided on
// this replica's copy of the node when the copy can (cache.go).
func (p *Store) Report(ctx context.Context, id string, run store.ReportRun) (*overload.Notice, error) {
	if p.jobs == nil {
		j := &reportJob{id: id, run: run}
		if len(p.reportQuick(ctx, []*reportJob{j})) > 0 {
			p.reportAlone(ctx, j)
		}
		return j.notice, j.err
	}
	j := &reportJob{ctx: ctx, id: id, run: run, done: make(chan struct{})}
	select {
	case p.jobs <- j:
	case <-ctx.Done():
		return nil, fmt.Errorf("report of %s: %w: %w", id, store.ErrUnavailable, ctx.Err())
	}
	select {
	case <-j.done:
		return j.notice, j.err
	case <-ctx.Done():
		// The batch may still commit it: the agent's retry is then a
		// duplicate.
		return nil, fmt.Errorf("report of %s: %w: %w", id, store.ErrUnavailable, ctx.Err())
	}
}

// reportAlone takes one report in a transaction of its own.
func (p *Store) reportAlone(ctx context.Context, j *reportJob) {
	t, err := p.takeBatch(ctx, nil, []*reportJob{j})
	if err != nil {
		j.notice, j.err = nil, err
		return
	}
	p.logClosures(t.nodes...) // before the copies go back: another report may take one
	p.cache.keep(t.nodes)
}

// reportIn takes job j's reading in tx: lock its node (created if new),
// take the reading, plan the node, write it all back but its notice,
// which the caller sends (sendNotices) once every node of the
// transaction is written, and returns the node. A reading refused
// (duplicate, older, invalid) writes nothing and is j's error, with no
// node.
func (p *Store) reportIn(ctx context.Context, tx pgx.Tx, j *reportJob) (*pgNode, error) {
	n, err := p.lockNode(ctx, tx, j.id, true)
	if err != nil {
		return nil, err
	}
	now := p.Now()
	if j.err = j.run.Take(n.Node, now); j.err != nil {
		// A node is kept from its first counted reading: the row this
		// transaction inserted (created) goes; a row another committed
		// is never deleted.
		if n.created {
			if _, err := tx.Exec(ctx, `DELETE FROM nodes WHERE id = $1`, j.id); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	if err := j.run.Plan(n.Node, now, newPGTx(ctx, tx, nil)); err != nil {
		return nil, err
	}
	if err := p.saveNode(ctx, tx, n, now); err != nil {
		return nil, err
	}
	return n, nil
}

// Update runs fn on node id in a transaction holding its row lock, and
// writes back what fn changed (withNode).
func (p *Store) Update(ctx context.Context, id string, fn func(n *store.Node, now time.Time, tx store.NodeTx) error) error {
	return p.withNode(ctx, id, false, func(tx pgx.Tx, n *pgNode, now time.Time) error {
		return fn(n.Node, now, newPGTx(ctx, tx, nil))
	})
}

// pgTx is the PostgreSQL store's NodeTx: a transaction holding a node's
// row lock.
type pgTx struct {
	ctx  context.Context
	tx   pgx.Tx
	load func() error // loads the node's live routes; nil: loaded
	alts *pgAlternatives
}

// newPGTx is tx's NodeTx for a node whose live routes load loads (nil:
// loaded with the node).
func newPGTx(ctx context.Context, tx pgx.Tx, load func() error) *pgTx {
	return &pgTx{ctx: ctx, tx: tx, load: load}
}

// Alternatives loads n's live routes, if they were not, and answers
// by a query in the transaction (pgAlternatives).
func (t *pgTx) Alternatives(n *store.Node, _ time.Time) (routing.Alternatives, error) {
	if t.load != nil {
		if err := t.load(); err != nil {
			return nil, err
		}
		t.load = nil
	}
	t.alts = &pgAlternatives{ctx: t.ctx, tx: t.tx, n: n}
	return t.alts, nil
}

func (t *pgTx) Failed() error {
	if t.alts == nil {
		return nil
	}
	return t.alts.err
}

// RouteTaken: route ids are never reused, so closed routes count.
func (t *pgTx) RouteTaken(id string) (bool, error) {
	var taken bool
	err := t.tx.QueryRow(t.ctx, `SELECT EXISTS (SELECT 1 FROM routes WHERE id = $1)`, id).Scan(&taken)
	return taken, err
}

// Read runs fn on node id as one read-only snapshot shows it: with
// history, with its latest closures and its notice count.
func (p *Store) Read(ctx context.Context, id string, history bool, fn func(n *store.Node, now time.Time) error) error {
	return p.inReadTx(ctx, func(tx pgx.Tx) error {
		n, err := p.selectNode(ctx, tx, id)
		if err != nil {
			return err
		}
		if history {
			if err := loadHistory(ctx, tx, n.Node); err != nil {
				return err
			}
		}
		return fn(n.Node, p.Now())
	})
}

// loadHistory loads node n's latest closures, oldest first, and its
// notice count.
func loadHistory(ctx context.Context, tx pgx.Tx, n *store.Node) error {
	id := n.Info.ID
	rows, err := tx.Query(ctx, `SELECT closed_by, closed_at, body FROM routes WHERE node = $1 AND closed_at IS NOT NULL
		ORDER BY closed_at DESC, id DESC LIMIT $2`, id, store.MaxClosed)
	if err != nil {
		return err
	}
	for rows.Next() {
		var action, body []byte
		var c store.ClosedRoute
		var rt store.Route
		if err := rows.Scan(&action, &c.At, &body); err != nil {
			rows.Close()
			return err
		}
		if json.Unmarshal(action, &c.Action) == nil && json.Unmarshal(body, &rt) == nil {
			c.Earned = rt.Earned
			n.Closed = append(n.Closed, c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	slices.Reverse(n.Closed)
	return tx.QueryRow(ctx, `SELECT count(*) FROM notices WHERE node = $1`, id).Scan(&n.NoticeCount)
}

// NodeIDs is every node's id, sorted.
func (p *Store) NodeIDs(ctx context.Context) ([]string, error) {
	rows, err := p.db.Query(ctx, `SELECT id FROM nodes ORDER BY id`)
	if err != nil {
		return nil, classify(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, classify(err)
}

// RouteNode is the node holding live route id.
func (p *Store) RouteNode(ctx context.Context, id string) (string, error) {
	var node string
	err := p.db.QueryRow(ctx, `SELECT node FROM routes WHERE id = $1 AND closed_at IS NULL`, id).Scan(&node)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", store.ErrUnknown
	}
	return node, classify(err)
}

// selectNode loads node id in tx without locking it; an unknown id is an
// error wrapping ErrUnknownNode.
func (p *Store) selectNode(ctx context.Context, tx pgx.Tx, id string) (*pgNode, error) {
	var state []byte
	err := tx.QueryRow(ctx, `SELECT state FROM nodes WHERE id = $1`, id).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("node %q: %w", id, store.ErrUnknownNode)
	}
	if err != nil {
		return nil, err
	}
	return p.loadNode(ctx, tx, id, state)
}

// EachNode runs fn on the nodes whose ids sort after after, at most
// limit of them (0: all), by id, each from its row, live routes and
// notice count as one read-only snapshot shows them (NodeStore.EachNode);
// a node whose stored state cannot be read is given with its error. A
// page reads only its own nodes' routes and notices.
func (p *Store) EachNode(ctx context.Context, after string, limit int, fn func(id string, n *store.Node, now time.Time, err error)) (string, error) {
	type row struct {
		id    string
		state []byte
	}
	var nodes []row
	var routes map[string][]*store.Route
	var notices map[string]int
	err := p.inReadTx(ctx, func(tx pgx.Tx) error {
		nodes = nodes[:0]
		var lim *int // NULL: LIMIT ALL
		if limit > 0 {
			lim = &limit
		}
		rows, err := tx.Query(ctx, `SELECT id, state FROM nodes WHERE id > $1 ORDER BY id LIMIT $2`, after, lim)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.state); err != nil {
				rows.Close()
				return err
			}
			nodes = append(nodes, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var ids []string // nil: every node's
		if limit > 0 || after != "" {
			ids = make([]string, len(nodes))
			for i, r := range nodes {
				ids[i] = r.id
			}
		}
		if routes, err = liveRoutes(ctx, tx, ids); err != nil {
			return err
		}
		notices, err = noticeCounts(ctx, tx, ids)
		return err
	})
	if err != nil {
		return "", err
	}
	now := p.Now()
	for _, r := range nodes {
		nd, err := p.DecodeNode(r.state)
		if err != nil {
			fn(r.id, nil, now, fmt.Errorf("node %s: stored state: %w", r.id, err))
			continue
		}
		for _, rt := range routes[r.id] {
			nd.Routes[rt.Route.ID] = rt
		}
		nd.Info.LiveUsers = store.LiveUsers(nd)
		nd.NoticeCount = notices[r.id]
		fn(r.id, nd, now, nil)
	}
	last := ""
	if len(nodes) > 0 {
		last = nodes[len(nodes)-1].id
	}
	return last, nil
}

// liveRoutes returns the live routes of the nodes ids, or of every node
// when ids is nil, by node.
func liveRoutes(ctx context.Context, tx pgx.Tx, ids []string) (map[string][]*store.Route, error) {
	rows, err := tx.Query(ctx, `SELECT node, body FROM routes WHERE closed_at IS NULL AND ($1::text[] IS NULL OR node = ANY($1))`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]*store.Route{}
	for rows.Next() {
		var node string
		var body []byte
		if err := rows.Scan(&node, &body); err != nil {
			return nil, err
		}
		var rt store.Route
		if err := json.Unmarshal(body, &rt); err != nil {
			continue // shown by the node's own view as an error
		}
		out[node] = append(out[node], &rt)
	}
	return out, rows.Err()
}

// noticeCounts returns how many notices each of the nodes ids has had,
// or every node when ids is nil.
func noticeCounts(ctx context.Context, tx pgx.Tx, ids []string) (map[string]int, error) {
	rows, err := tx.Query(ctx, `SELECT node, count(*) FROM notices WHERE $1::text[] IS NULL OR node = ANY($1) GROUP BY node`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var node string
		var n int
		if err := rows.Scan(&node, &n); err != nil {
			return nil, err
		}
		out[node] = n
	}
	return out, rows.Err()
}

// Events pages through every event of node id, oldest first.
func (p *Store) Events(ctx context.Context, id string, after int64, limit int) (store.EventPage, error) {
	page := store.EventPage{Node: id, Events: []store.NumberedEvent{}}
	err := p.inReadTx(ctx, func(tx pgx.Tx) error {
		page.Events, page.Next = page.Events[:0], 0
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nodes WHERE id = $1)`, id).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("events of node %q: %w", id, store.ErrUnknownNode)
		}
		var lim *int // NULL: LIMIT ALL
		if limit > 0 {
			more := limit + 1
			lim = &more
		}
		rows, err := tx.Query(ctx, `SELECT id, body FROM events WHERE node = $1 AND id > $2 ORDER BY id LIMIT $3`, id, after, lim)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e store.NumberedEvent
			var body []byte
			if err := rows.Scan(&e.ID, &body); err != nil {
				return err
			}
			if err := json.Unmarshal(body, &e.Event); err != nil {
				return fmt.Errorf("event %d of node %s: %w", e.ID, id, err)
			}
			if limit > 0 && len(page.Events) == limit {
				page.Next = page.Events[limit-1].ID
				break
			}
			page.Events = append(page.Events, e)
		}
		return rows.Err()
	})
	return page, err
}

// Notices returns the notices whose id is above after, by id, at most
// limit of them (0: all), and the last one's id (after, when there is
// none). Ids grow with commits (numberNotices), so a client paging on
// from the last id it saw misses none committed later.
func (p *Store) Notices(ctx context.Context, after int64, limit int) ([]store.NumberedNotice, int64, error) {
	out := []store.NumberedNotice{}
	last := after
	var lim *int // NULL: LIMIT ALL
	if limit > 0 {
		lim = &limit
	}
	// Notices committed before this request are numbered first.
	if err := p.numberNotices(ctx); err != nil {
		p.Log.Warn("notices not numbered", "err", err)
	}
	err := p.inReadTx(ctx, func(tx pgx.Tx) error {
		out, last = out[:0], after
		rows, err := tx.Query(ctx, `SELECT num, body FROM notices WHERE num > $1 ORDER BY num LIMIT $2`, after, lim)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var body []byte
			var n store.NumberedNotice
			if err := rows.Scan(&n.ID, &body); err != nil {
				return err
			}
			last = n.ID
			if json.Unmarshal(body, &n.Notice) == nil { // else a stored value of an older shape
				out = append(out, n)
			}
		}
		return rows.Err()
	})
	return out, last, err
}

// Plans returns each node's latest plan that closed something, by node,
// of the nodes whose ids sort after after, at most limit of them (0: all),
// and the last one's node id.
func (p *Store) Plans(ctx context.Context, after string, limit int) ([]routing.Plan, string, error) {
	out := []routing.Plan{}
	last := ""
	var lim *int // NULL: LIMIT ALL
	if limit > 0 {
		lim = &limit
	}
	err := p.inReadTx(ctx, func(tx pgx.Tx) error {
		out, last = out[:0], ""
		rows, err := tx.Query(ctx, `SELECT id, state->'last_plan' FROM nodes
			WHERE state->'last_plan' IS NOT NULL AND id > $1 ORDER BY id LIMIT $2`, after, lim)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var body []byte
			var plan routing.Plan
			if err := rows.Scan(&last, &body); err != nil {
				return err
			}
			if json.Unmarshal(body, &plan) == nil { // else a stored value of an older shape
				out = append(out, plan)
			}
		}
		return rows.Err()
	})
	return out, last, err
}

// PlanDue plans every registered node whose plan is due (not planned by
// a report or a round for planEvery), one transaction per node. A node
// another replica is planning or reporting is skipped (FOR UPDATE SKIP
// LOCKED), so replicas share the round without planning a node twice.
//
// A node that cannot be planned (its state does not load, its plan or
// its write-back fails) does not stop the round: its error is logged,
// its next plan is pushed back by planEvery in a transaction of its own
// (so it is not the oldest due again at the next round), and the round
// goes on with the others; the round's error counts and names those
// nodes. Only the round's own deadline, or a database that cannot be
// reached, ends it early.
func (p *Store) PlanDue(ctx context.Context, plan store.PlanFunc) error {
	// Notices committed since the last numbering.
	if err := p.numberNotices(ctx); err != nil {
		p.Log.Warn("notices not numbered", "err", err)
	}
	failed := []string{} // nodes not planned this round (not NULL: NOT (id = ANY(NULL)) holds for none)
	var firstErr error
	for {
		found := false
		var id string
		var planned *pgNode
		err := p.inTx(ctx, func(tx pgx.Tx) error {
			found, id, planned = false, "", nil
			now := p.Now()
			var state []byte
			err := tx.QueryRow(ctx, `SELECT id, state FROM nodes WHERE role IS NOT NULL AND next_plan_at <= $1
				AND NOT (id = ANY($2)) ORDER BY next_plan_at LIMIT 1 FOR UPDATE SKIP LOCKED`, now, failed).Scan(&id, &state)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			found = true
			n, err := p.loadNode(ctx, tx, id, state)
			if err != nil {
				return err
			}
			if err := plan(n.Node, now, newPGTx(ctx, tx, nil)); err != nil {
				return err
			}
			planned = n
			return p.saveNode(ctx, tx, n, now)
		})
		if err == nil {
			p.logClosures(planned)
		}
		if err != nil && id != "" && ctx.Err() == nil {
			p.Log.Error("plan round: node not planned", "node", id, "err", err)
			failed = append(failed, id)
			firstErr = cmp.Or(firstErr, err)
			if _, perr := p.db.Exec(ctx, `UPDATE nodes SET next_plan_at = $2 WHERE id = $1`, id, p.Now().Add(p.planEvery)); perr != nil {
				p.Log.Error("plan round: next plan not pushed back", "node", id, "err", perr)
			}
			continue
		}
		if err != nil {
			return err
		}
		if !found {
			if len(failed) > 0 {
				return fmt.Errorf("%d nodes not planned (%s): %w", len(failed), strings.Join(failed, ", "), firstErr)
			}
			return nil
		}
	}
}

// OperatorReceivers is every operator's receiver (ReceiverStore).
func (p *Store) OperatorReceivers(ctx context.Context) (map[string]store.OperatorReceiver, error) {
	rows, err := p.db.Query(ctx, `SELECT operator, body FROM operator_receivers`)
	out := map[string]store.OperatorReceiver{}
	var op string
	var body []byte
	err = eachRow(rows, err, []any{&op, &body}, func() error {
		var r store.OperatorReceiver
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("receiver of operator %s: %w", op, err)
		}
		out[op] = r
		return nil
	})
	return out, classify(err)
}

// UpdateReceiver runs fn on operator's receiver in a transaction holding
// its row's lock (the row made first if there is none, kept only if fn
// returns nil).
func (p *Store) UpdateReceiver(ctx context.Context, operator string, fn func(r *store.OperatorReceiver, now time.Time) error) error {
	return p.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO operator_receivers (operator, body) VALUES ($1, '{}') ON CONFLICT (operator) DO NOTHING`, operator); err != nil {
			return err
		}
		var body []byte
		if err := tx.QueryRow(ctx, `SELECT body FROM operator_receivers WHERE operator = $1 FOR UPDATE`, operator).Scan(&body); err != nil {
			return err
		}
		var r store.OperatorReceiver
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("receiver of operator %s: %w: %w", operator, store.ErrUnsaved, err)
		}
		if err := fn(&r, p.Now()); err != nil {
			return err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("receiver of operator %s: %w: %w", operator, store.ErrUnsaved, err)
		}
		_, err = tx.Exec(ctx, `UPDATE operator_receivers SET body = $2, updated_at = now() WHERE operator = $1`, operator, b)
		return err
	})
}
