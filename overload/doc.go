// Package overload decides when a node that carries other people's
// long-lived connections is overloaded, with the platform's exact rules.
//
// A [Reading] is one report of one node at one instant: memory used, the
// 15-minute load average against the CPU count, the kernel's connection
// (conntrack) table and the connections it dropped when full, connections
// dropped by full listen queues, and bandwidth against link speed. It is
// also the wire format between the node agent and the platform (JSON,
// `"v": 1`).
//
// A node is overloaded when a threshold is passed "and it stays that way in
// 3 of 5 readings": each check keeps its own window of the last five
// readings. A [Tracker] (one per node) observes readings in order, produces
// Start and End events, and a [Notice] that names every check that holds,
// in figures ("memory at 92 %"), at most one an hour for a node.
//
// The package is pure: time comes in with each reading and nothing here
// calls time.Now or does I/O, so the agent and the platform, which both
// import it, reach the same verdict from the same readings.
package overload
