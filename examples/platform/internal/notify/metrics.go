package notify

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// WriteMetrics writes n's figures to b in the Prometheus text format:
// the outbox's deliveries by status (every replica's, from the store),
// this replica's attempts by outcome, and the age of the oldest pending
// delivery. A nil n writes them as zero; an error is the store's.
func (n *Notifier) WriteMetrics(ctx context.Context, b *bytes.Buffer) error {
	var counts map[string]int64
	var oldest time.Time
	if n != nil && n.box != nil {
		var err error
		if counts, oldest, err = n.box.Counts(ctx); err != nil {
			return err
		}
	}
	b.WriteString("# HELP platform_notice_deliveries Notice deliveries in the outbox, by status.\n")
	b.WriteString("# TYPE platform_notice_deliveries gauge\n")
	for _, s := range []string{store.StatusPending, store.StatusDelivered, store.StatusFailed, store.StatusUndeliverable} {
		fmt.Fprintf(b, "platform_notice_deliveries{status=%q} %d\n", s, counts[s])
	}
	b.WriteString("# HELP platform_notice_delivery_attempts_total Delivery attempts by this replica, by outcome (release: the receiver was busy, no request made).\n")
	b.WriteString("# TYPE platform_notice_delivery_attempts_total counter\n")
	for _, o := range slices.Sorted(slices.Values(store.OutcomeNames[:])) {
		var v int64
		if n != nil {
			v = n.attempts[slices.Index(store.OutcomeNames[:], o)].Load()
		}
		fmt.Fprintf(b, "platform_notice_delivery_attempts_total{outcome=%q} %d\n", o, v)
	}
	age := 0.0
	if !oldest.IsZero() && n != nil {
		age = max(0, n.now().Sub(oldest).Seconds())
	}
	b.WriteString("# HELP platform_notice_oldest_pending_seconds Age of the oldest pending delivery, from its decision (0: none pending).\n")
	b.WriteString("# TYPE platform_notice_oldest_pending_seconds gauge\n")
	fmt.Fprintf(b, "platform_notice_oldest_pending_seconds %g\n", age)
	return nil
}
