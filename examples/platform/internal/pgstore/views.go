package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/routing"
)

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
