package pgstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
)

// BenchmarkOperatorReceiver reads one operator's receiver, as a
// dashboard page or GET /receiver does, beside reading every operator's
// (OperatorReceivers, which the page read before), with 1,000 operators
// holding a receiver each.
func BenchmarkOperatorReceiver(b *testing.B) {
	url := pgtest.Need(b, cluster).NewDatabase(b)
	p, err := Open(b.Context(), url, store.Config{}, Options{PlanEvery: 30 * time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	const operators = 1000
	for i := range operators {
		err := p.UpdateReceiver(b.Context(), fmt.Sprintf("op%04d", i), func(r *store.OperatorReceiver, now time.Time) error {
			*r = store.OperatorReceiver{URL: fmt.Sprintf("https://hooks.example.net/op%04d", i),
				Secrets: []store.OperatorSecret{{Key: []byte("0123456789abcdef01234567")}}, Created: now}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Run("one", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, ok, err := p.OperatorReceiver(b.Context(), fmt.Sprintf("op%04d", i%operators)); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("every", func(b *testing.B) {
		for b.Loop() {
			if ops, err := p.OperatorReceivers(b.Context()); err != nil || len(ops) != operators {
				b.Fatal(len(ops), err)
			}
		}
	})
}
