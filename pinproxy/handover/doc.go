// Package handover moves a running server's listening sockets and
// established connections to a new process, so that it can replace its
// binary without closing a connection or refusing a client: the
// hand-over protocol, its wire format, descriptor passing (SCM_RIGHTS
// over a SOCK_SEQPACKET Unix socket), re-exec and descriptor
// inheritance. It knows nothing of what the connections carry: a
// connection is its two sockets, the pipes that hold its bytes in
// flight, and its state (ConnState); package pinproxy hands its own
// over with it.
//
// The old process runs Handoff; the new one Adopt and then
// Adoption.Ready. The hand-over is all-or-nothing until the new process
// serves:
//
//  1. The old process says its version; the new process asks (within
//     Config.Stall of connecting: a peer that says nothing is dropped
//     before anything pauses).
//  2. The old process stops everything it offers and sends it; the new
//     one takes nothing until it has it all, then says so.
//  3. The new process starts everything but the copying and accepting,
//     and says it is ready; the old one commits.
//  4. The new process says it serves, and only then touches a socket.
//     Once that has reached the old process, the old one drops its
//     copies.
//
// Until step 4 the old process keeps every descriptor it sent, and takes
// everything back if the new process fails, hangs, goes away or is not
// ready before the old one's ctx ends: nothing was touched, so nothing
// is lost. Whether "serving" reached it is decided by the socket itself:
// the old process shuts it for reading before it gives up, and says so,
// so a late "serving" fails in the new process, which then touches
// nothing. If instead the old process dies after its commit, the new one
// finds the socket closed without a word, and serves.
//
// Re-exec, as a server upgrades itself on a signal:
//
//	// the old process
//	peer, err := handover.Exec("MYSERVER_HANDOVER_FD")
//	rep, err := handover.Handoff(ctx, peer, handover.Config{}, stopAndDescribe)
//	if rep.Serving { /* drop the copies and exit 0 */ }
//
//	// the new process, at start
//	peer, err := handover.Inherited("MYSERVER_HANDOVER_FD") // nil: a fresh start
//	a, err := handover.Adopt(ctx, peer)
//	// take a.Listeners and a.Conns, start serving but not copying, then
//	err = a.Ready(ctx, startCopying)
//
// Or without a parent: the old process listens on a socket path (Listen)
// and the new one connects there (Dial); both check each other's
// credentials. Built for Linux; elsewhere reading a peer's credentials
// returns an error wrapping errors.ErrUnsupported, and off Unix so does
// passing descriptors.
package handover
