package main

import (
	"os"
	"testing"

	"github.com/proofkit/nodekit/internal/testing/pgtest"
)

// cluster is the throwaway PostgreSQL cluster of this package's tests; nil
// without PostgreSQL (the tests needing it skip).
var cluster *pgtest.Cluster

func TestMain(m *testing.M) {
	code := pgtest.Main(m, &cluster)
	platformBuild.Clean()
	os.Exit(code)
}
