package pgstore

import (
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/examples/platform/internal/storetest"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
)

// TestContract: the PostgreSQL store passes the stores' contract, with
// its batches and its cache of quiet nodes, two replicas on a database.
func TestContract(t *testing.T) {
	storetest.Run(t, storetest.Store{Replicas: true, Open: func(t *testing.T) storetest.Opener {
		url := pgtest.Need(t, cluster).NewDatabase(t)
		return func(c *platformtest.Clock, seed *store.SeedFile) store.Store {
			st, err := Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t)}, Options{PlanEvery: 30 * time.Second, Batch: 8, Cache: 1000}, seed)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			return st
		}
	}})
}
