package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

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
//
// A node's plan time is at most planEvery ahead of the clock that set
// it. One further ahead of now than that (and store.ClockSlack) was set
// by a clock that has since stepped back, or by a replica whose clock is
// ahead of this one's: the node is due now, not when this clock reaches
// the time (store.SteppedBack). Without that, a replica's clock stepped
// back an hour planned no node for an hour but those it reported.
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
				// A plan time a clock step put ahead: a query of its
				// own, so each walks the index from its end and stops at
				// the first row, not past every node planned lately.
				err = tx.QueryRow(ctx, `SELECT id, state FROM nodes WHERE role IS NOT NULL AND next_plan_at > $1
					AND NOT (id = ANY($2)) ORDER BY next_plan_at DESC LIMIT 1 FOR UPDATE SKIP LOCKED`, store.StepBound(now, p.planEvery), failed).Scan(&id, &state)
			}
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
