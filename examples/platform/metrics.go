package main

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// serveMetrics answers GET /metrics in the Prometheus text format: the
// outbox's deliveries by status (every replica's, from the store), this
// replica's attempts by outcome, and the age of the oldest pending
// delivery.
func serveMetrics(n *notifier, w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	var counts map[string]int64
	var oldest time.Time
	if n != nil && n.box != nil {
		var err error
		if counts, oldest, err = n.box.Counts(r.Context()); err != nil {
			writeFailure(w, fmt.Errorf("metrics: %w", err))
			return
		}
	}
	b.WriteString("# HELP platform_notice_deliveries Notice deliveries in the outbox, by status.\n")
	b.WriteString("# TYPE platform_notice_deliveries gauge\n")
	for _, s := range []string{store.StatusPending, store.StatusDelivered, store.StatusFailed, store.StatusUndeliverable} {
		fmt.Fprintf(&b, "platform_notice_deliveries{status=%q} %d\n", s, counts[s])
	}
	b.WriteString("# HELP platform_notice_delivery_attempts_total Delivery attempts by this replica, by outcome (release: the receiver was busy, no request made).\n")
	b.WriteString("# TYPE platform_notice_delivery_attempts_total counter\n")
	for _, o := range slices.Sorted(slices.Values(store.OutcomeNames[:])) {
		var v int64
		if n != nil {
			v = n.attempts[slices.Index(store.OutcomeNames[:], o)].Load()
		}
		fmt.Fprintf(&b, "platform_notice_delivery_attempts_total{outcome=%q} %d\n", o, v)
	}
	age := 0.0
	if !oldest.IsZero() && n != nil {
		age = max(0, n.now().Sub(oldest).Seconds())
	}
	b.WriteString("# HELP platform_notice_oldest_pending_seconds Age of the oldest pending delivery, from its decision (0: none pending).\n")
	b.WriteString("# TYPE platform_notice_oldest_pending_seconds gauge\n")
	fmt.Fprintf(&b, "platform_notice_oldest_pending_seconds %g\n", age)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(b.Bytes())
}
