// Package btcdlab tests pinproxy against real peer-to-peer software: two
// btcd full nodes (github.com/btcsuite/btcd, pure Go) in simnet as
// upstreams, and clients on btcd's peer package holding connections
// through the pinproxy binary, all in a network namespace of the test's
// own. It is a module of its own so that btcd stays out of nodekit's
// go.mod; nothing here ships in a binary.
//
// Run it from this directory, as root (it skips without):
//
//	cd internal/testing/btcdlab && go test -v -count=1 ./...
//
// The test builds btcd and cmd/pinproxy once per run (about half a
// minute with a cold build cache), then plays the case of an upstream
// that accepts the TCP connection and refuses the session: one node bans
// the proxy's address (every client behind the proxy shares it), the
// clients settle on the other node within seconds, and once the banning
// node restarts clean, connections move back to it one per rebalance
// round. It plays a node whose inbound slots are full the same way: the
// clients settle on the other node, and once a slot frees one connection
// moves back, and no more than the node holds. It plays the pull
// request's case (a node started after the proxy, then restarted while
// clients hold connections on it: failover, then moves back until the
// spread is even) and an upgrade on SIGUSR2 while the clients hold, which
// drops none and after which each still has its ping answered. It also
// checks the Bitcoin version/verack check bytes documented
// in docs/pinproxy.md against btcd's own encoding.
package btcdlab
