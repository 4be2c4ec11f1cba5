package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// pgNode is a node as loaded in a transaction, with what is needed to
// write back only what changed.
type pgNode struct {
	*store.Node
	state   []byte            // the state column as loaded
	bodies  map[string][]byte // each live route's body as loaded
	created bool              // this transaction created the node's row
	version int64             // the row's version as this transaction wrote it; 0 before
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
