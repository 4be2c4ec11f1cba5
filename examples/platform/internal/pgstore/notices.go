package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
)

// noticeLock is the advisory lock a numbering of notices takes, until
// its transaction ends (numberNotices).
const noticeLock = 0x6e6f6b69746e6f74 // "nokitnot"

// sendNotices inserts the notices of the nodes the transaction reported
// (at most one a node), unnumbered (numberNotices numbers them once
// committed), with their outbox rows: the statements of noticeRounds, in
// order, in one pipeline (queueNotices).
func (p *Store) sendNotices(ctx context.Context, tx pgx.Tx, nodes []*pgNode) error {
	rounds, err := p.noticeRounds(nodes, p.Now())
	if err != nil {
		return err
	}
	if len(rounds) == 0 {
		return nil
	}
	var b pgx.Batch
	queueNotices(&b, rounds)
	br := tx.SendBatch(ctx, &b)
	err = p.readNotices(br, rounds)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// queueNotices queues the statements of rounds on b, between planEachRun
// and planOnce.
func queueNotices(b *pgx.Batch, rounds []noticeRound) {
	if len(rounds) == 0 {
		return
	}
	b.Queue(planEachRun)
	for _, r := range rounds {
		b.Queue(r.sql, r.args...)
	}
	b.Queue(planOnce)
}

// readNotices reads, from br, the results of what queueNotices queued,
// and settles each round.
func (p *Store) readNotices(br pgx.BatchResults, rounds []noticeRound) error {
	if len(rounds) == 0 {
		return nil
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	for _, r := range rounds {
		inserted, err := scanInserted(br.Query())
		if err != nil {
			return err
		}
		p.settleNotices(r, inserted)
	}
	_, err := br.Exec()
	return err
}

// planEachRun has the transaction's statements planned on every run,
// from there on, on the tables as they are then (plan_cache_mode
// force_custom_plan); planOnce goes back to the session's setting (by
// default force_generic_plan: planned once, at the session's first run).
//
// The notice inserts run between them. A session runs them rarely (one
// notice a node an hour), so a plan of its own is cheap; and notices grows
// from empty, a few notices a minute: a plan made once, on the table as
// autovacuum last analyzed it (empty, in a new database's first minutes),
// reads every notice on every insert (a sequential scan; 20,000 notices,
// 3 ms a statement) until its next ANALYZE, which for a table that only
// grows comes after a tenth more rows. A plan made at each run sees the
// table's size as it is.
const (
	planEachRun = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`
	planOnce    = `SET LOCAL plan_cache_mode TO DEFAULT`
)

// noticeRound is one statement of noticeRounds: the notices of nodes, at
// most one a node, and outbox rows.
type noticeRound struct {
	nodes []*pgNode // those with a notice in this round
	sql   string
	args  []any
}

// noticeRounds are the statements that insert the notices of nodes (at
// most one a node: a node's two notices, of its two readings in one
// batch, each in a node of its own, go one statement each, so the second
// sees the first), each with the outbox rows of what the transaction
// decided for its nodes: a notice's only if the notice goes in, in the
// same transaction (a notice counted is delivered, one rolled back is
// never sent); the end of an overload's, when asked for, in the first.
// Each returns the nodes whose notice went in (scanInserted); none is
// needed when there is nothing to insert.
//
// The hour is decided here too, not only by the tracker: no notice goes
// into the table within NoticeEvery of the node's last one (the node's
// row lock, held, orders that node's notices). A notice refused so is
// taken out of its node by settleNotices.
func (p *Store) noticeRounds(nodes []*pgNode, now time.Time) ([]noticeRound, error) {
	var rounds []noticeRound
	var ends []store.Delivery
	var pending []*pgNode
	for _, n := range nodes {
		if n == nil {
			continue
		}
		if n.Notice != nil {
			pending = append(pending, n)
		}
		if d, ok, err := p.EndDelivery(n.Node, now); err != nil {
			return nil, err
		} else if ok {
			ends = append(ends, d)
		}
	}
	for len(pending) > 0 || len(ends) > 0 {
		var ids, bodies []string
		var ats, cuts []time.Time
		var these []*pgNode
		seen := map[string]bool{}
		rest := pending[:0:0]
		var out outboxRows
		for _, d := range ends {
			out.add(d, d.At, false)
		}
		ends = nil
		for _, n := range pending {
			id := n.Info.ID
			if seen[id] {
				rest = append(rest, n)
				continue
			}
			seen[id] = true
			b, err := json.Marshal(n.Notice)
			if err != nil {
				return nil, fmt.Errorf("node %s: notice: %w: %w", id, store.ErrUnsaved, err)
			}
			every := n.Tracker.Limits().NoticeEvery
			if every <= 0 {
				every = overload.DefaultLimits().NoticeEvery
			}
			ids, bodies, ats, cuts = append(ids, id), append(bodies, string(b)), append(ats, n.Notice.At), append(cuts, n.Notice.At.Add(-every))
			these = append(these, n)
			if d, ok, err := p.NoticeDelivery(n.Node, now); err != nil {
				return nil, err
			} else if ok {
				out.add(d, n.Notice.At, true)
			}
		}
		if ids == nil {
			ids, bodies, ats, cuts = []string{}, []string{}, []time.Time{}, []time.Time{}
		}
		rounds = append(rounds, noticeRound{nodes: these, sql: noticeInsert,
			args: append([]any{ids, ats, bodies, cuts}, out.args()...)})
		pending = rest
	}
	return rounds, nil
}

// noticeInsert inserts notices ($1 nodes, $2 times, $3 bodies), each only
// if its node has none after its cut ($4), with their outbox rows (from
// $5), and returns the nodes whose notice went in.
//
// The node's latest notice is a scalar subquery, not NOT EXISTS, which
// the server turns into a join: planned on a table it takes for nearly
// empty, a hash join over all of notices. The subquery, a subplan run
// per row, reads notices_by_node's last entry for the node, unless the
// table's statistics say it is empty; it runs between planEachRun and
// planOnce, so it is planned on the table as it is.
var noticeInsert = `WITH sent AS (
		INSERT INTO notices (node, at, body)
		SELECT u.node, u.at, u.body::jsonb FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::timestamptz[]) WITH ORDINALITY AS u (node, at, body, cut, i)
		WHERE coalesce((SELECT max(at) FROM notices WHERE node = u.node), '-infinity') <= u.cut
		ORDER BY u.i
		RETURNING node),
	outbox AS (` + outboxInsert(5, `NOT d.of_notice OR d.node IN (SELECT node FROM sent)`) + `)
	SELECT node FROM sent`

// scanInserted reads what a statement of noticeRounds returns: the nodes
// whose notice went in.
func scanInserted(rows pgx.Rows, err error) (map[string]bool, error) {
	inserted := map[string]bool{}
	var id string
	err = eachRow(rows, err, []any{&id}, func() error {
		inserted[id] = true
		return nil
	})
	return inserted, err
}

// settleNotices takes the notices of r that did not go in, inserted
// naming those that did, out of their nodes.
func (p *Store) settleNotices(r noticeRound, inserted map[string]bool) {
	for _, n := range r.nodes {
		if !inserted[n.Info.ID] {
			p.Log.Warn("notice not sent: the node had one within the hour", "node", n.Info.ID, "at", n.Notice.At)
			n.Notice = nil
		}
	}
}

// numberNotices numbers the notices committed and not numbered yet, in
// one transaction that takes noticeLock first. GET /notices pages by the
// number, so a notice must never become visible after one with a higher
// number. A sequence taken in the deciding transaction does not give
// that (one may take 5, another 6 and commit first: a client that paged
// past 6 never sees 5); holding a lock from the number to the commit
// does, but made every report's transaction with a notice wait for the
// commit of the one before. So the notices go in unnumbered, and are
// numbered afterwards by this short transaction: under the lock, which
// the server releases only after the commit is visible, each numbering
// sees every one before it committed, and its numbers are above theirs
// and visible at once. A notice committed after a numbering read the
// table is numbered by the next, above: one committed later is never
// numbered below one already visible.
//
// Numbering is left to the readers: GET /notices numbers before it
// reads, so it lists every notice committed before it, and each plan
// round numbers too, so the numbers keep up without readers. A report
// pays nothing for it.
func (p *Store) numberNotices(ctx context.Context) error {
	var waiting bool
	if err := p.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM notices WHERE num IS NULL)`).Scan(&waiting); err != nil {
		return classify(err)
	}
	if !waiting {
		return nil
	}
	return p.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(noticeLock)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `WITH waiting AS (SELECT id FROM notices WHERE num IS NULL ORDER BY id FOR UPDATE),
				numbered AS (SELECT id, nextval('notice_numbers') AS num FROM waiting)
			UPDATE notices n SET num = numbered.num FROM numbered WHERE n.id = numbered.id`)
		return err
	})
}

// Notices returns the notices whose id is above after, by id, at most
// limit of them (0: all), and the last one's id (after, when there is
// none). Ids grow with commits (numberNotices), so a client paging on
// from the last id it saw misses none committed later.
func (p *Store) Notices(ctx context.Context, after int64, limit int) ([]store.NumberedNotice, int64, error) {
	out := []store.NumberedNotice{}
	last := after
	var lim *int // NULL: LIMIT ALL
	if limit > 0 {
		lim = &limit
	}
	// Notices committed before this request are numbered first.
	if err := p.numberNotices(ctx); err != nil {
		p.Log.Warn("notices not numbered", "err", err)
	}
	err := p.inReadTx(ctx, func(tx pgx.Tx) error {
		out, last = out[:0], after
		rows, err := tx.Query(ctx, `SELECT num, body FROM notices WHERE num > $1 ORDER BY num LIMIT $2`, after, lim)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var body []byte
			var n store.NumberedNotice
			if err := rows.Scan(&n.ID, &body); err != nil {
				return err
			}
			last = n.ID
			if json.Unmarshal(body, &n.Notice) == nil { // else a stored value of an older shape
				out = append(out, n)
			}
		}
		return rows.Err()
	})
	return out, last, err
}
