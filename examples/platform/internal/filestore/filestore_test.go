package filestore_test

import (
	"testing"

	"github.com/proofkit/nodekit/examples/platform/internal/filestore"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/examples/platform/internal/storetest"
)

// TestContract: the file store passes the stores' contract.
func TestContract(t *testing.T) {
	storetest.Run(t, storetest.Store{Open: func(t *testing.T) storetest.Opener {
		dir := t.TempDir()
		return func(c *platformtest.Clock, seed *store.SeedFile) store.Store {
			st, err := filestore.Open(store.Config{StateDir: dir, Now: c.Now, Logger: platformtest.Logger(t)}, seed)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
	}})
}
