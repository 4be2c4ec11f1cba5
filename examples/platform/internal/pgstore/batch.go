package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
)

// reportJob is one report waiting for a batch.
type reportJob struct {
	ctx context.Context // the request's
	id  string          // the node's
	run store.ReportRun // the use case's take and plan
	// notice is the notice kept, err the report's error.
	notice *overload.Notice
	err    error
	done   chan struct{}
	// cached is its node's copy, with the reading taken on it (taken),
	// which decideQuick left to the usual way: the reading started or
	// ended an overload, or sent a notice, or left the node one a plan
	// can act on. The usual way starts from it, not from the row's state
	// decoded and the reading taken again, if the row it locks is still
	// at the copy's version (decideReports). Used once: a transaction run
	// again decodes the row.
	cached cachedNode
	taken  bool
}

// batchWorker takes the reports waiting, up to max, into one transaction
// at a time, while it holds the workers' turn (p.turn). Without linger a
// report arriving when no batch runs goes alone, at once: batches grow
// only with load. With linger, a worker that took a report waits up to
// linger for more before it starts: each report waits that much longer,
// and under load a commit takes that many more reports.
//
// The turn passes on when the batch has committed, or has run p.spill,
// or at once if the batch is full: while one batch runs, the reports
// arriving wait for the next, which takes them all at once, unless the
// one running is held up (on a lock, on a flush) or took as many as a
// batch may, when they go into a batch beside it.
func (p *Store) batchWorker(max int, linger time.Duration) {
	defer p.workers.Done()
	var timer *time.Timer
	if linger > 0 {
		timer = time.NewTimer(linger)
		timer.Stop()
	}
	for {
		select {
		case <-p.turn:
		case <-p.stop:
			return
		}
		var batch []*reportJob
		select {
		case j := <-p.jobs:
			batch = append(batch, j)
		case <-p.stop:
			p.turn <- struct{}{}
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
		// The one turn is held here, so it is given back once: at once
		// if the batch is full (more reports may be waiting than it
		// took), else by the spill's timer or after the batch, whichever
		// comes first.
		var pass sync.Once
		give := func() { pass.Do(func() { p.turn <- struct{}{} }) }
		if len(batch) == max {
			give()
		}
		spill := time.AfterFunc(p.spill, give)
		p.runBatch(batch)
		spill.Stop()
		give()
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
func (p *Store) runBatch(batch []*reportJob) {
	defer func() {
		for _, j := range batch {
			close(j.done)
		}
	}()
	alone := func(j *reportJob) {
		ctx, cancel := context.WithTimeout(context.Background(), p.batchTimeout)
		defer cancel()
		p.reportAlone(ctx, j)
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
	rest = slices.Clone(rest)
	slices.SortStableFunc(rest, byNode)
	ctx, cancel := context.WithTimeout(context.Background(), p.batchTimeout)
	t, err := p.takeBatch(ctx, qs, rest)
	cancel()
	if err == nil {
		p.settleQuick(t.qs, t.written) // every one written, or taken the usual way
		p.logKept(t)                   // before the copies go back: another report may take one
		p.cache.keep(t.nodes)
		return
	}
	all := rest
	for _, q := range qs {
		all = append(all, q.j)
	}
	slices.SortStableFunc(all, byNode)
	sorted := all
	p.Log.Warn("report batch failed: its reports are taken again one by one", "reports", len(all), "err", err)
	var wg sync.WaitGroup
	for len(sorted) > 0 {
		k := 1
		for k < len(sorted) && sorted[k].id == sorted[0].id {
			k++
		}
		run := sorted[:k]
		sorted = sorted[k:]
		wg.Go(func() {
			for _, j := range run {
				if j.gone() {
					j.notice, j.err = nil, fmt.Errorf("report of %s: %w: the request ended", j.id, store.ErrUnavailable)
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

func byNode(a, b *reportJob) int { return strings.Compare(a.id, b.id) }

// batchTaken is what a batch's transaction committed.
type batchTaken struct {
	nodes []*pgNode    // the nodes written the usual way, nil for each reading refused
	jobs  []*reportJob // their reports, nodes[i] jobs[i]'s
	// qs are the reports decided on copies of their nodes that the
	// transaction took (nil when it ran again: they were then taken the
	// usual way), and written the new versions of those it wrote so.
	qs      []quickReport
	written map[string]int64
}

// lockNodes locks the rows of nodes, in ID order (as lockNode does for
// one), and returns their states and versions.
const lockNodes = `SELECT id, state, version FROM nodes WHERE id = ANY($1) ORDER BY id FOR UPDATE`

// takeBatch takes the reports of rest (sorted by node, one node's in the
// order they came) and qs, decided on copies of their nodes, in one
// transaction, run again (up to txAttempts times, the copies then not used) when
// it conflicts with another. The transaction costs two round trips,
// besides one for each node whose plan closes a route (saveRoutes) and
// what a node new to the database, or with two readings in the batch,
// needs (reportIn): BEGIN, the copies' rows written, the other nodes'
// rows locked and their live routes read go together in the first; the
// notices with their outbox rows, the rows with their events, and COMMIT
// in the last.
func (p *Store) takeBatch(ctx context.Context, qs []quickReport, rest []*reportJob) (batchTaken, error) {
	var t batchTaken
	err := runTx(func(attempt int) error {
		if attempt > 0 && len(qs) > 0 {
			// The copies are used once: a transaction run again takes
			// their reports the usual way.
			rest = slices.Clone(rest)
			for _, q := range qs {
				rest = append(rest, q.j)
			}
			slices.SortStableFunc(rest, byNode)
			qs = nil
		}
		var err error
		t, err = p.takeBatchOnce(ctx, qs, rest)
		return err
	})
	return t, err
}

// takeBatchOnce is one run of takeBatch's transaction.
//
// The statements of a round trip go in one pipeline, with one Sync: if
// one fails, the server skips those after it, COMMIT included, and the
// transaction is left failed, then rolled back. The rows' UPDATE, sent
// with COMMIT, itself fails unless it wrote every row (rowsUpdate), so a
// committed batch never leaves a node unwritten.
func (p *Store) takeBatchOnce(ctx context.Context, qs []quickReport, rest []*reportJob) (t batchTaken, err error) {
	c, err := p.db.Acquire(ctx)
	if err != nil {
		return t, err
	}
	defer c.Release() // a connection left in a transaction is closed, not reused
	var first pgx.Batch
	first.BeginTx(pgx.TxOptions{})
	if len(qs) > 0 {
		sql, args, err := quickUpdate(qs)
		if err != nil {
			return t, err
		}
		first.Queue(sql, args...)
	}
	var ids []string
	for _, j := range rest {
		if len(ids) == 0 || ids[len(ids)-1] != j.id {
			ids = append(ids, j.id)
		}
	}
	if len(ids) > 0 {
		first.Queue(lockNodes, ids)
		// Begun once the locks are granted, so it sees every route as
		// the locks' last holders left them (lockNode).
		first.Queue(routesOfNodes, ids)
	}
	br := c.SendBatch(ctx, &first)
	tx := br.Tx()
	defer func() {
		if err != nil {
			tx.Rollback(ctx) // a rollback that fails closes the connection
		}
	}()
	var states map[string]lockedRow
	_, err = br.Exec()
	if err == nil && len(qs) > 0 {
		t.written, err = scanVersions(br.Query())
	}
	var routes map[string][]storedRoute
	if err == nil && len(ids) > 0 {
		if states, err = scanStates(br.Query()); err == nil {
			routes, err = scanRoutes(br.Query())
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return t, err
	}
	t.qs = qs
	jobs := rest
	for _, q := range qs {
		if _, ok := t.written[q.n.Info.ID]; !ok {
			// A stale copy: taken the usual way, its row locked by
			// reportIn.
			jobs = append(slices.Clip(jobs), q.j)
		}
	}
	slices.SortStableFunc(jobs, byNode)
	now := p.Now()
	nodes, written, err := p.decideReports(ctx, tx, jobs, states, routes, now)
	if err != nil {
		return t, err
	}
	rounds, err := p.noticeRounds(nodes, now)
	if err != nil {
		return t, err
	}
	var last pgx.Batch
	queueNotices(&last, rounds)
	if len(written) > 0 {
		rsql, rargs, err := p.rowsUpdate(written, true, now)
		if err != nil {
			return t, err
		}
		last.Queue(rsql, rargs...)
	}
	last.Queue("COMMIT")
	br = tx.SendBatch(ctx, &last)
	err = p.readNotices(br, rounds)
	if err == nil && len(written) > 0 {
		var versions map[string]int64
		if versions, err = scanVersions(br.Query()); err == nil {
			err = setVersions(written, versions)
		}
		err = rowsMissed(err)
	}
	if err == nil {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err == nil && tag.String() != "COMMIT" {
			err = fmt.Errorf("commit: the server answered %s", tag)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && c.Conn().PgConn().TxStatus() != 'I' {
		err = fmt.Errorf("commit: the connection is still in a transaction (%c)", c.Conn().PgConn().TxStatus())
	}
	if err != nil {
		return t, err
	}
	for i, j := range jobs {
		if nodes[i] != nil {
			j.notice = nodes[i].Notice // nil if the database refused it
		}
	}
	t.nodes, t.jobs = nodes, jobs
	return t, nil
}

// routesOfNodes reads the live routes of nodes, each row's node first.
const routesOfNodes = `SELECT node, body, relied_on FROM routes WHERE node = ANY($1) AND closed_at IS NULL`

// storedRoute is a live route as stored.
type storedRoute struct {
	body   []byte
	relied *time.Time
}

// scanRoutes reads the rows of routesOfNodes: each node's live routes, by
// node ID.
func scanRoutes(rows pgx.Rows, err error) (map[string][]storedRoute, error) {
	out := map[string][]storedRoute{}
	var id string
	var r storedRoute
	err = eachRow(rows, err, []any{&id, &r.body, &r.relied}, func() error {
		out[id] = append(out[id], r)
		r = storedRoute{}
		return nil
	})
	return out, err
}

// lockedRow is a node's row as lockNodes read it.
type lockedRow struct {
	state   []byte
	version int64
}

// scanStates reads the rows of lockNodes: each node's state and version,
// by ID.
func scanStates(rows pgx.Rows, err error) (map[string]lockedRow, error) {
	states := map[string]lockedRow{}
	var id string
	var r lockedRow
	err = eachRow(rows, err, []any{&id, &r.state, &r.version}, func() error {
		states[id] = r
		r = lockedRow{} // Scan into a []byte reuses it
		return nil
	})
	return states, err
}

// decideReports takes the readings of jobs (sorted by node, one node's in
// the order they came) in tx, which holds the locks of the nodes' rows
// in states and read their live routes (routes) once it held them, and
// returns each job's node (nil for a reading refused), and the nodes
// whose events and rows are left to write (rowsUpdate);
// their notices the caller sends (sendNotices).
//
// A node with one reading in the batch, whose row is locked, costs no
// statement of its own unless it can be planned something: a node neither
// overloaded nor paused closes nothing whatever its routes (routing's
// rules), so its routes are not used. A node overloaded or paused, or
// whose routes' prices may have moved since its last plan (a lower price
// reaching its sessions), is planned as alone: on its routes as read
// after the lock (read again if an earlier node's plan in tx wrote one of
// them, relying on it), its closures written and checked under the routes' locks, in ID
// order, before the next node is planned, so a later node's plan sees
// what an earlier one closed (saveRoutes). A node not among states (new
// to the database, or a stale copy's), or with more than one reading in
// the batch, is taken reading by reading (reportIn), written at once.
func (p *Store) decideReports(ctx context.Context, tx pgx.Tx, jobs []*reportJob, states map[string]lockedRow, routes map[string][]storedRoute, now time.Time) (nodes, written []*pgNode, err error) {
	nodes = make([]*pgNode, len(jobs))
	touched := map[string]bool{} // nodes whose routes tx wrote since they were read
	for i := 0; i < len(jobs); {
		id := jobs[i].id
		k := i + 1
		for k < len(jobs) && jobs[k].id == id {
			k++
		}
		row, held := states[id]
		if !held || k > i+1 {
			for ; i < k; i++ {
				n, err := p.reportIn(ctx, tx, jobs[i])
				if err != nil {
					return nil, nil, err
				}
				nodes[i] = n
				if n != nil {
					for _, r := range n.Relied {
						touched[r.Node] = true
					}
				}
			}
			continue
		}
		j := jobs[i]
		i = k
		nd, taken, err := p.nodeOfRow(j, row)
		if err != nil {
			return nil, nil, fmt.Errorf("node %s: stored state: %w: %w", id, store.ErrUnsaved, err)
		}
		n := &pgNode{Node: nd, state: row.state, bodies: map[string][]byte{}}
		j.err = nil
		if !taken {
			n.ClearChange()
			if j.err = j.run.Take(n.Node, now); j.err != nil {
				continue
			}
		}
		nodes[k-1] = n
		written = append(written, n)
		// The node's routes are read only if its plan asks for them: a
		// quiet node's plan only dates its budgets.
		load := func() error {
			if touched[id] {
				return loadRoutes(ctx, tx, id, n)
			}
			return n.addRoutes(routes[id])
		}
		if err := j.run.Plan(n.Node, now, newPGTx(ctx, tx, load)); err != nil {
			return nil, nil, err
		}
		if err := p.saveRoutes(ctx, tx, n, now); err != nil {
			return nil, nil, err
		}
		for _, r := range n.Relied {
			touched[r.Node] = true
		}
	}
	return nodes, written, nil
}

// nodeOfRow is the node of row, which j's reading is about: j's copy of
// it if the row is still at the copy's version (the state the row holds,
// decoded, is the copy: nodeCache), and whether the reading was taken on
// it; else the row's state decoded. The copy is used once.
func (p *Store) nodeOfRow(j *reportJob, row lockedRow) (*store.Node, bool, error) {
	c, taken := j.cached, j.taken
	j.cached, j.taken = cachedNode{}, false
	if c.node != nil && c.version == row.version {
		p.cache.reused.Add(1)
		return c.node, taken, nil
	}
	n, err := p.DecodeNode(row.state)
	return n, false, err
}
