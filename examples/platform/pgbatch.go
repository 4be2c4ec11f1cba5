package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

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
// at a time. Without linger a report arriving when a worker is idle goes
// alone, at once: batches grow only with load. With linger, a worker
// that took a report waits up to linger for more before it starts: each
// report waits that much longer, and under load a commit takes that many
// more reports.
func (p *pgPlatform) batchWorker(max int, linger time.Duration) {
	defer p.workers.Done()
	var timer *time.Timer
	if linger > 0 {
		timer = time.NewTimer(linger)
		timer.Stop()
	}
	for {
		var batch []*reportJob
		select {
		case j := <-p.jobs:
			batch = append(batch, j)
		case <-p.stop:
			return
		}
		if timer != nil {
			timer.Reset(linger)
		}
	more:
		for len(batch) < max {
			select {
			case j := <-p.jobs:
				batch = append(batch, j)
				continue
			default:
			}
			if timer == nil {
				break
			}
			select {
			case j := <-p.jobs:
				batch = append(batch, j)
			case <-timer.C:
				break more
			case <-p.stop:
				break more
			}
		}
		if timer != nil {
			timer.Stop()
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
	// Reports a copy of their node decides: alone, one statement their
	// transaction; beside others, the first statement of the batch's.
	qs, rest := p.decideQuick(batch)
	if len(rest) == 0 {
		qctx, cancel := context.WithTimeout(context.Background(), p.batchTimeout)
		rest, qs = p.commitQuick(qctx, qs), nil
		cancel()
	}
	switch {
	case len(rest) == 0:
		return
	case len(rest) == 1 && len(qs) == 0:
		alone(rest[0])
		return
	}
	all := slices.Clone(rest)
	for _, q := range qs {
		all = append(all, q.j)
	}
	slices.SortStableFunc(all, func(a, b *reportJob) int { return strings.Compare(a.r.Node, b.r.Node) })
	ctx, cancel := context.WithTimeout(context.Background(), p.batchTimeout)
	var nodes []*pgNode
	var written map[string]int64
	attempt := 0
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		attempt++
		jobs := all
		written = nil
		if attempt == 1 && len(qs) > 0 {
			// The copies are used once: a transaction run again takes
			// their reports the usual way.
			var err error
			if written, err = writeQuick(ctx, tx, qs); err != nil {
				return err
			}
			jobs = slices.Clone(rest)
			for _, q := range qs {
				if _, ok := written[q.n.info.ID]; !ok {
					jobs = append(jobs, q.j)
				}
			}
			slices.SortStableFunc(jobs, func(a, b *reportJob) int { return strings.Compare(a.r.Node, b.r.Node) })
		}
		var err error
		if nodes, err = p.takeReports(ctx, tx, jobs); err != nil {
			return err
		}
		if err := p.sendNotices(ctx, tx, nodes); err != nil {
			return err
		}
		for i, j := range jobs {
			if nodes[i] != nil {
				j.out.Notice = nodes[i].notice // nil if the database refused it
			}
		}
		return nil
	})
	cancel()
	if err == nil {
		if attempt == 1 {
			p.settleQuick(qs, written) // every one written, or taken by takeReports
		}
		p.cache.keep(nodes)
		p.logClosures(nodes...)
		return
	}
	sorted := all
	p.log.Warn("report batch failed: its reports are taken again one by one", "reports", len(all), "err", err)
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

// takeReports takes the readings of jobs (sorted by node, one node's in
// the order they came) in tx, and returns each job's node (nil for a
// reading refused), written back but for its notice, which the caller
// sends (sendNotices) once every node is written.
//
// Every node's row is locked first, in one statement, in ID order, as
// lockNode does for one. A node with one reading in the batch, whose row
// exists, then costs no statement of its own unless it can be planned
// something: a node neither overloaded nor paused closes nothing whatever
// its routes (routing's rules), so its routes are not read; the rows and
// events of all are written in one statement each, at the end. A node
// overloaded or paused, or whose routes' prices may have moved since its
// last plan (a lower price reaching its sessions), is planned as alone:
// its routes read after the lock, its closures written and checked under
// the routes' locks, in ID order, before the next node is planned, so a
// later node's plan sees what an earlier one closed (saveRoutes). A node
// new to the database, or with more than one reading in the batch, is
// taken reading by reading (reportIn).
func (p *pgPlatform) takeReports(ctx context.Context, tx pgx.Tx, jobs []*reportJob) ([]*pgNode, error) {
	nodes := make([]*pgNode, len(jobs))
	ids := make([]string, 0, len(jobs))
	for _, j := range jobs {
		if len(ids) == 0 || ids[len(ids)-1] != j.r.Node {
			ids = append(ids, j.r.Node)
		}
	}
	states := make(map[string][]byte, len(ids))
	rows, err := tx.Query(ctx, `SELECT id, state FROM nodes WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var state []byte
		if err := rows.Scan(&id, &state); err != nil {
			rows.Close()
			return nil, err
		}
		states[id] = state
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	now := p.now()
	var written []*pgNode // their events and rows written together, at the end
	for i := 0; i < len(jobs); {
		id := jobs[i].r.Node
		k := i + 1
		for k < len(jobs) && jobs[k].r.Node == id {
			k++
		}
		state, held := states[id]
		if !held || k > i+1 {
			for ; i < k; i++ {
				j := jobs[i]
				out, refused, n, err := p.reportIn(ctx, tx, j.r)
				if err != nil {
					return nil, err
				}
				j.out, j.err, nodes[i] = out, refused, n
			}
			continue
		}
		j := jobs[i]
		i = k
		nd, err := p.decodeNode(state)
		if err != nil {
			return nil, fmt.Errorf("node %s: stored state: %w: %w", id, errUnsaved, err)
		}
		n := &pgNode{node: nd, state: state, bodies: map[string][]byte{}}
		out, refused := p.observe(n.node, j.r, now)
		j.out, j.err = out, refused
		if refused != nil {
			continue
		}
		n.event, n.notice = out.Event, out.Notice
		nodes[k-1] = n
		written = append(written, n)
		if !p.quiet(n.node, now) {
			if err := loadRoutes(ctx, tx, id, n); err != nil {
				return nil, err
			}
			if err := p.plan(ctx, tx, n, now); err != nil {
				return nil, err
			}
			if err := p.saveRoutes(ctx, tx, n, now); err != nil {
				return nil, err
			}
			continue
		}
		// Planned without its routes: the plan only dates the node's
		// budgets.
		if err := p.plan(ctx, tx, n, now); err != nil {
			return nil, err
		}
		if len(n.closing) > 0 {
			return nil, fmt.Errorf("node %s: a plan without routes closed %d: %w", id, len(n.closing), errUnsaved)
		}
	}
	if err := p.addEvents(ctx, tx, written); err != nil {
		return nil, err
	}
	if err := p.updateRows(ctx, tx, written, now); err != nil {
		return nil, err
	}
	return nodes, nil
}

// quiet reports whether a plan of n at now can change nothing but n's
// budgets' dates: n is registered, neither overloaded nor paused (so
// routing closes none of its routes, used or not), and no price change
// may have reached its sessions since its last plan (which priced its
// routes as they are stored).
func (p *pgPlatform) quiet(n *node, now time.Time) bool {
	if n.info.Role == 0 {
		return true // never planned
	}
	if n.info.Paused || n.info.Overloaded() {
		return false
	}
	last := n.info.State.PlannedAt
	if last.IsZero() || now.Before(last) {
		return false
	}
	if k := n.prices.Len(); k > 0 {
		c := n.prices.Changes()[k-1]
		if !c.At.Add(n.prices.Window()).Before(last) {
			return false
		}
	}
	return true
}
