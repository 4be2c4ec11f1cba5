// Package e2e holds the end-to-end test of nodekit's binaries working
// together: the agent (cmd/proofkit-agent) reading a fake /proc tree and
// reporting to the platform example (examples/platform), and pinproxy
// (cmd/pinproxy) in front of two nodes.
//
// The test builds the binaries once, runs them on loopback ports, drives
// a node into overload by rewriting its fake meminfo, and checks, through
// the platform's HTTP API, that the node is refused, one notice goes out,
// the right routes are closed, and the node is offered again after the
// overload ends and the cool-down passes. It has no code of its own:
//
//	go test -race -count=1 ./examples/e2e
package e2e
