// Package storetest is the contract every store of the platform passes:
// what the use cases rely on of a store.Store, run against each store
// by its own tests, as River's riverdrivertest exercises every driver.
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, storetest.Store{Open: func(t *testing.T) storetest.Opener {
//			dir := t.TempDir()
//			return func(c *platformtest.Clock, seed *store.SeedFile) store.Store {
//				st, err := filestore.Open(store.Config{StateDir: dir, Now: c.Now}, seed)
//				…
//			}
//		}})
//	}
//
// The PostgreSQL store runs it with its batches and its cache of quiet
// nodes, so those are held to the same contract.
package storetest
