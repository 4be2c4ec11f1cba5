package main

import (
	"os"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/pgtest"
)

// cluster is the throwaway PostgreSQL cluster of this package's tests; nil
// without PostgreSQL (the tests needing it skip).
var cluster *pgtest.Cluster

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &cluster)) }

// newPGTestPlatform starts a platform on the database at url, served by
// an httptest server; called twice on one url, two replicas.
func newPGTestPlatform(t *testing.T, url string, c *clock, seed *seedFile) *testPlatform {
	t.Helper()
	p, err := openPG(t.Context(), url, config{Now: c.now, Logger: testLogger(t)}, 30*time.Second, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return serveTest(t, c, p)
}
