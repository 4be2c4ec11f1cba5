package main

import (
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/overload"
)

// reportJob is one report waiting for a batch.
type reportJob struct {
	r    overload.Reading
	out  reportOutcome
	err  error
	done chan struct{}
}

// batchWorker takes the reports waiting, up to max, into one transaction
// at a time. A report arriving when a worker is idle goes alone, at once:
// batches grow only with load.
func (p *pgPlatform) batchWorker(max int) {
	defer p.workers.Done()
	for {
		var batch []*reportJob
		select {
		case j := <-p.jobs:
			batch = append(batch, j)
		case <-p.stop:
			return
		}
	more:
		for len(batch) < max {
			select {
			case j := <-p.jobs:
				batch = append(batch, j)
			default:
				break more
			}
		}
		p.runBatch(batch)
	}
}

// runBatch takes a batch's reports in one transaction, nodes in ID order
// (so two batches never wait on each other's node locks in a circle), one
// node's readings in the order they came. If the transaction fails, each
// report is taken again alone, so one node's failure fails only its own
// report; a report the failed commit did count is then found a duplicate.
func (p *pgPlatform) runBatch(batch []*reportJob) {
	defer func() {
		for _, j := range batch {
			close(j.done)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if len(batch) == 1 {
		j := batch[0]
		j.out, j.err = p.reportAlone(ctx, j.r)
		return
	}
	sorted := slices.Clone(batch)
	slices.SortStableFunc(sorted, func(a, b *reportJob) int { return strings.Compare(a.r.Node, b.r.Node) })
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		for _, j := range sorted {
			out, refused, err := p.reportIn(ctx, tx, j.r)
			if err != nil {
				return err
			}
			j.out, j.err = out, refused
		}
		return nil
	})
	if err != nil {
		for _, j := range batch {
			j.out, j.err = p.reportAlone(ctx, j.r)
		}
	}
}
