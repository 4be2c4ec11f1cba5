// Package demo holds the input of the README's third quick start, a
// /proc of two files that puts a node into overload and takes it out
// again, and the test that runs the README's quick starts as written.
//
//	overloaded/  loadavg 0.10, meminfo with memory at 95 % used (over the 90 % limit)
//	normal/      the same load, memory at 40 % used
//
// The agent reads such a tree with -proc:
//
//	mkdir -p demo && cp examples/demo/overloaded/* demo/
//	proofkit-agent -proc demo -sysctl off ...
//	cp examples/demo/normal/meminfo demo/    # the overload ends
//
// Inputs the tree does not hold (connections, conntrack, links) are
// reported missing and never count towards an overload.
//
// TestQuickStart* extract the sh blocks between the "quickstart" markers
// in README.md, run them in one bash session (as a reader pastes them,
// job control on) inside a fresh network namespace against freshly built
// binaries, and check what the README says is seen: each sample log line,
// the answers of /admit and /status, the files written. They need root
// (for the namespace) and skip without it.
package demo
