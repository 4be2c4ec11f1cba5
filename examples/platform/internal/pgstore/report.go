package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
)

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
	p.logKept(t) // before the copies go back: another report may take one
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
