package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/routing"
)

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

// RouteNode is the node holding live route id.
func (p *Store) RouteNode(ctx context.Context, id string) (string, error) {
	var node string
	err := p.db.QueryRow(ctx, `SELECT node FROM routes WHERE id = $1 AND closed_at IS NULL`, id).Scan(&node)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", store.ErrUnknown
	}
	return node, classify(err)
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

var _ routing.Alternatives = (*pgAlternatives)(nil)

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

// unusedClosure reports whether a closes a route for moving no traffic
// (on an overloaded exit, or draining a paused node).
func unusedClosure(a routing.Action) bool {
	return a.Reason == routing.ReasonUnused || a.Reason == routing.ReasonDrain
}

// logKept tells each report t took the usual way that it was kept
// (ReportRun.Kept: the use case logs what the reading started), then
// logs the closures of its plan, so a node's "overload started" comes
// before the routes its plan closed.
func (p *Store) logKept(t batchTaken) {
	for i, n := range t.nodes {
		if n == nil {
			continue
		}
		t.jobs[i].run.Kept(t.jobs[i].notice)
		p.logClosures(n)
	}
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
