// Command agentbench measures the node agent's footprint on a busy node:
// resident memory (VmHWM, VmRSS) and CPU time per reading (utime + stime
// from /proc/PID/stat over many readings) of the built proofkit-agent,
// probing a network namespace that holds 50,000 established loopback TCP
// connections and reporting every reading to a local platform.
//
// It is a benchmark harness, not a test. Run it as root (it creates a
// network namespace, nk-agentbench-PID, and deletes it on the way out):
//
//	go run ./internal/tools/agentbench                      # 0 and 50,000 connections
//	go run ./internal/tools/agentbench -conns 0,10000,50000 -readings 200 -interval 100ms
//
// A process may open 20,000 files here, so the connections are spread over
// helper processes (this program re-executed with -hold), 5,000 each (both
// ends, 10,000 descriptors). With nft installed, a rule in the namespace
// makes conntrack track them, so the table holds 50,000 entries too.
//
// The targets (docs/benchmarks.md): RSS ≤ 25 MiB and ≤ 15 ms of CPU per reading with
// 50,000 connections.
package main
