// Package filestore is the platform's embedded store: one process, one
// lock, and one JSON file per node in a state directory, written
// atomically after each change and read back at start, so a restart
// loses nothing.
//
// Beside the node files it keeps operators.state (the operators' own
// receivers) and outbox.log (the deliveries of notices, appended and
// synced before the node file that holds the notice, and replayed at
// start). It implements store.Store; every change of a node runs under
// the store's one lock, so it serves one replica only.
//
//	st, err := filestore.Open(store.Config{StateDir: dir}, seed)
package filestore
