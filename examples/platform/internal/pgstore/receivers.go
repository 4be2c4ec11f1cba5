package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// OperatorReceivers is every operator's receiver (ReceiverStore).
func (p *Store) OperatorReceivers(ctx context.Context) (map[string]store.OperatorReceiver, error) {
	rows, err := p.db.Query(ctx, `SELECT operator, body FROM operator_receivers`)
	out := map[string]store.OperatorReceiver{}
	var op string
	var body []byte
	err = eachRow(rows, err, []any{&op, &body}, func() error {
		var r store.OperatorReceiver
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("receiver of operator %s: %w", op, err)
		}
		out[op] = r
		return nil
	})
	return out, classify(err)
}

// OperatorReceiver is operator's receiver; false when they have none
// (ReceiverStore).
func (p *Store) OperatorReceiver(ctx context.Context, operator string) (store.OperatorReceiver, bool, error) {
	var body []byte
	err := p.db.QueryRow(ctx, `SELECT body FROM operator_receivers WHERE operator = $1`, operator).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.OperatorReceiver{}, false, nil
	}
	if err != nil {
		return store.OperatorReceiver{}, false, classify(err)
	}
	var r store.OperatorReceiver
	if err := json.Unmarshal(body, &r); err != nil {
		return store.OperatorReceiver{}, false, fmt.Errorf("receiver of operator %s: %w", operator, err)
	}
	return r, true, nil
}

// UpdateReceiver runs fn on operator's receiver in a transaction holding
// its row's lock (the row made first if there is none, kept only if fn
// returns nil).
func (p *Store) UpdateReceiver(ctx context.Context, operator string, fn func(r *store.OperatorReceiver, now time.Time) error) error {
	return p.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO operator_receivers (operator, body) VALUES ($1, '{}') ON CONFLICT (operator) DO NOTHING`, operator); err != nil {
			return err
		}
		var body []byte
		if err := tx.QueryRow(ctx, `SELECT body FROM operator_receivers WHERE operator = $1 FOR UPDATE`, operator).Scan(&body); err != nil {
			return err
		}
		var r store.OperatorReceiver
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("receiver of operator %s: %w: %w", operator, store.ErrUnsaved, err)
		}
		if err := fn(&r, p.Now()); err != nil {
			return err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("receiver of operator %s: %w: %w", operator, store.ErrUnsaved, err)
		}
		_, err = tx.Exec(ctx, `UPDATE operator_receivers SET body = $2, updated_at = now() WHERE operator = $1`, operator, b)
		return err
	})
}
