package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/overload"
)

// reportJob is one report waiting for a batch.
type reportJob struct {
	ctx  context.Context // the request's
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
//
// The batch's transaction has batchTimeout, and each report taken again
// alone a fresh batchTimeout of its own, not what is left of the batch's:
// a batch that timed out waiting on one node's lock (held by a replica
// that froze) has used its deadline up, and the other reports in it would
// all fail for that one node. Reports taken again alone run one node after
// another within a node, in the order they came, and the nodes at once;
// a report whose client has gone is not taken again (its retry will be).
func (p *pgPlatform) runBatch(batch []*reportJob) {
	defer func() {
		for _, j := range batch {
			close(j.done)
		}
	}()
	alone := func(j *reportJob) {
		ctx, cancel := context.WithTimeout(context.Background(), p.batchTimeout)
		defer cancel()
		j.out, j.err = p.reportAlone(ctx, j.r)
	}
	if len(batch) == 1 {
		alone(batch[0])
		return
	}
	sorted := slices.Clone(batch)
	slices.SortStableFunc(sorted, func(a, b *reportJob) int { return strings.Compare(a.r.Node, b.r.Node) })
	ctx, cancel := context.WithTimeout(context.Background(), p.batchTimeout)
	var nodes []*pgNode
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		nodes = make([]*pgNode, len(sorted))
		for i, j := range sorted {
			out, refused, n, err := p.reportIn(ctx, tx, j.r)
			if err != nil {
				return err
			}
			j.out, j.err, nodes[i] = out, refused, n
		}
		if err := p.sendNotices(ctx, tx, nodes); err != nil {
			return err
		}
		for i, j := range sorted {
			if nodes[i] != nil {
				j.out.Notice = nodes[i].notice // nil if the database refused it
			}
		}
		return nil
	})
	cancel()
	if err == nil {
		p.logClosures(nodes...)
		return
	}
	p.log.Warn("report batch failed: its reports are taken again one by one", "reports", len(batch), "err", err)
	var wg sync.WaitGroup
	for len(sorted) > 0 {
		k := 1
		for k < len(sorted) && sorted[k].r.Node == sorted[0].r.Node {
			k++
		}
		run := sorted[:k]
		sorted = sorted[k:]
		wg.Go(func() {
			for _, j := range run {
				if j.gone() {
					j.out, j.err = reportOutcome{}, fmt.Errorf("report of %s: %w: the request ended", j.r.Node, errUnavailable)
					continue
				}
				alone(j)
			}
		})
	}
	wg.Wait()
}

// gone reports whether the request that sent the job has ended.
func (j *reportJob) gone() bool { return j.ctx != nil && j.ctx.Err() != nil }
