package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/routing"
)

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
