package api_test

import (
	"os"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/pgstore"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
)

// cluster is the throwaway PostgreSQL cluster of this package's tests; nil
// without PostgreSQL (the tests needing it skip).
var cluster *pgtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(pgtest.Main(m, &cluster))
}

// newPGTestPlatform starts a platform on the database at url, served by
// an httptest server; called twice on one url, two replicas.
func newPGTestPlatform(t *testing.T, url string, c *platformtest.Clock, seed *store.SeedFile) *apitest.Platform {
	t.Helper()
	p, err := pgstore.Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t)}, pgstore.Options{PlanEvery: 30 * time.Second, Batch: 8, Cache: 1000}, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return apitest.Serve(t, c, p)
}
