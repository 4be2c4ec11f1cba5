package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// pgOutbox is the PostgreSQL store's outbox: the deliveries table. A row
// is inserted in the transaction that decides its notice, so a notice
// that is counted is delivered and one rolled back is never sent; workers
// on every replica claim due rows with FOR UPDATE SKIP LOCKED, each claim
// a short transaction that moves the row's next_at past a lease, so no
// transaction stays open across an HTTP attempt and a replica that dies
// mid-attempt leaves its rows due again when the lease runs out.
type pgOutbox struct {
	db *pgxpool.Pool
}

var _ store.OutboxStore = (*pgOutbox)(nil)

// outboxRows are outbox rows to insert in one statement (outboxInsert),
// each marked whether it is a notice's.
type outboxRows struct {
	ids, nodes, types, statuses, lastErrors []string
	ats, created                            []time.Time
	seqs                                    []int64
	next                                    []*time.Time
	bodies                                  [][]byte
	ofNotice                                []bool
}

func (o *outboxRows) add(d store.Delivery, at time.Time, ofNotice bool) {
	o.ids, o.nodes, o.types, o.statuses, o.lastErrors = append(o.ids, d.ID), append(o.nodes, d.Node), append(o.types, d.Type), append(o.statuses, d.Status), append(o.lastErrors, d.LastError)
	o.ats, o.created, o.next = append(o.ats, at), append(o.created, d.Created), append(o.next, nullTime(d.NextAt))
	o.seqs = append(o.seqs, d.Seq)
	o.bodies, o.ofNotice = append(o.bodies, d.Body), append(o.ofNotice, ofNotice)
}

// args are the rows as outboxInsert's arguments, in its order.
func (o *outboxRows) args() []any {
	if o.ids == nil {
		return []any{[]string{}, []string{}, []string{}, []time.Time{}, [][]byte{}, []time.Time{}, []string{}, []*time.Time{}, []string{}, []bool{}, []int64{}}
	}
	return []any{o.ids, o.nodes, o.types, o.ats, o.bodies, o.created, o.statuses, o.next, o.lastErrors, o.ofNotice, o.seqs}
}

// outboxInsert is the INSERT of outboxRows whose arguments start at $from
// (eleven of them, outboxRows.args), each row only where cond holds (d is
// the row, d.of_notice whether it is a notice's); a delivery decided
// twice (it cannot be: one notice an hour) is inserted once.
func outboxInsert(from int, cond string) string {
	ps := make([]any, 11)
	for i := range ps {
		ps[i] = from + i
	}
	return fmt.Sprintf(`INSERT INTO deliveries (id, node, type, at, body, created_at, status, next_at, last_error, seq)
		SELECT d.id, d.node, d.type, d.at, d.body, d.created_at, d.status, d.next_at, nullif(d.last_error, ''), d.seq
		FROM unnest($%d::text[], $%d::text[], $%d::text[], $%d::timestamptz[], $%d::bytea[], $%d::timestamptz[], $%d::text[], $%d::timestamptz[], $%d::text[], $%d::boolean[], $%d::bigint[])
			WITH ORDINALITY AS d (id, node, type, at, body, created_at, status, next_at, last_error, of_notice, seq, i)
		WHERE `+cond+`
		ORDER BY d.i
		ON CONFLICT (id) DO NOTHING`, ps...)
}

const deliveryColumns = `id, node, type, body, created_at, status, attempts, next_at, coalesce(last_status, 0), coalesce(last_error, ''), delivered_at, log`

// claimedColumns are deliveryColumns of the claim's UPDATE … FROM.
const claimedColumns = `d.id, d.node, d.type, d.body, d.created_at, d.status, d.attempts, d.next_at, coalesce(d.last_status, 0), coalesce(d.last_error, ''), d.delivered_at, d.log`

func scanDelivery(row pgx.Row) (store.Delivery, error) {
	var d store.Delivery
	var next, delivered *time.Time
	var log []byte
	err := row.Scan(&d.ID, &d.Node, &d.Type, &d.Body, &d.Created, &d.Status, &d.Attempts, &next, &d.LastStatus, &d.LastError, &delivered, &log)
	if err == nil && len(log) > 0 {
		if jerr := json.Unmarshal(log, &d.Log); jerr != nil {
			return d, fmt.Errorf("delivery %s: log: %w", d.ID, jerr)
		}
	}
	if next != nil {
		d.NextAt = *next
	}
	if delivered != nil {
		d.DeliveredAt = *delivered
	}
	return d, err
}

// Claim takes the due rows (next_at <= now), oldest first, then, while
// there is room, those a clock step put ahead (f.Due), furthest first:
// one statement, whose two scans each walk the index from its end, so
// neither passes the rows waiting out a back-off; the second runs only
// when the first leaves room.
func (o *pgOutbox) Claim(ctx context.Context, now time.Time, limit int, lease time.Duration, f store.ClaimFilter) ([]store.Delivery, error) {
	busy, own := f.Busy, f.Own
	if busy == nil {
		busy = []string{}
	}
	if own == nil {
		own = []string{}
	}
	rows, err := o.db.Query(ctx, claimSQL, now, now.Add(lease), limit, busy, f.AnyBusy, own, f.StepBound(now, lease))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// claimSQL claims up to $3 pending rows until $2, not of the nodes $4
// (nor, with $5, of any node but $6's), each its node's first pending
// message: those due at $1, oldest first, then those due after $7,
// furthest first.
var claimSQL = `WITH due AS (` + claimable(`next_at <= $1`, `next_at`) + `),
		ahead AS (` + claimable(`next_at > $7`, `next_at DESC`) + `),
		picked AS (SELECT id FROM due UNION ALL SELECT id FROM ahead LIMIT $3)
	UPDATE deliveries d SET attempts = d.attempts + 1, next_at = $2
	FROM picked WHERE d.id = picked.id
	RETURNING ` + claimedColumns

func claimable(due, order string) string {
	return `SELECT id FROM deliveries x
			WHERE status = 'pending' AND ` + due + ` AND NOT (node = ANY($4)) AND (NOT $5 OR node = ANY($6))
				-- a node's messages in the order they were decided
				AND NOT EXISTS (SELECT 1 FROM deliveries e WHERE e.node = x.node AND e.status = 'pending' AND e.seq < x.seq)
			ORDER BY ` + order + ` LIMIT $3 FOR UPDATE SKIP LOCKED`
}

func (o *pgOutbox) Settle(ctx context.Context, d store.Delivery, res store.AttemptResult) error {
	next := d.Apply(res)
	log, err := json.Marshal(next.Log)
	if err != nil {
		return err
	}
	if next.Log == nil {
		log = []byte("[]")
	}
	// Another replica may have claimed the row again (this one's lease ran
	// out): then only a delivery is recorded over its attempt.
	_, err = o.db.Exec(ctx, `UPDATE deliveries SET status = $3, attempts = $4, next_at = $5, last_status = nullif($6, 0),
			last_error = nullif($7, ''), delivered_at = $8, log = $9
		WHERE id = $1 AND status = 'pending' AND (attempts = $2 OR $3 = 'delivered')`,
		d.ID, d.Attempts, next.Status, next.Attempts, nullTime(next.NextAt), next.LastStatus, next.LastError, nullTime(next.DeliveredAt), log)
	return err
}

func (o *pgOutbox) Redeliver(ctx context.Context, id string, now time.Time) (bool, error) {
	// Asked for again: due now, given up only -notify-give-up from now.
	tag, err := o.db.Exec(ctx, `UPDATE deliveries SET status = 'pending', next_at = $2, created_at = $2, delivered_at = NULL WHERE id = $1`, id, now)
	if err != nil {
		return false, classify(err)
	}
	return tag.RowsAffected() == 1, nil
}

func (o *pgOutbox) ByIDs(ctx context.Context, ids []string) (map[string]store.Delivery, error) {
	out := map[string]store.Delivery{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := o.db.Query(ctx, `SELECT `+deliveryColumns+` FROM deliveries WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, classify(err)
		}
		out[d.ID] = d
	}
	return out, classify(rows.Err())
}

func (o *pgOutbox) ByNode(ctx context.Context, node string, limit int) ([]store.Delivery, error) {
	rows, err := o.db.Query(ctx, `SELECT `+deliveryColumns+` FROM deliveries WHERE node = $1 ORDER BY created_at DESC, id DESC LIMIT $2`, node, limit)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, d)
	}
	return out, classify(rows.Err())
}

func (o *pgOutbox) Counts(ctx context.Context) (map[string]int64, time.Time, error) {
	out := map[string]int64{}
	var oldest *time.Time
	rows, err := o.db.Query(ctx, `SELECT status, count(*) FROM deliveries GROUP BY status`)
	if err != nil {
		return nil, time.Time{}, classify(err)
	}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			rows.Close()
			return nil, time.Time{}, classify(err)
		}
		out[s] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, classify(err)
	}
	err = o.db.QueryRow(ctx, `SELECT min(created_at) FROM deliveries WHERE status = 'pending'`).Scan(&oldest)
	if err != nil || oldest == nil {
		return out, time.Time{}, classify(err)
	}
	return out, *oldest, nil
}
