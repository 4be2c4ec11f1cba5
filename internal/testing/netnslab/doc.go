// Package netnslab fills a network namespace with established TCP
// connections for benchmarks: the probe's BenchmarkRead and agentbench
// both measure a namespace holding tens of thousands of them.
//
// One process may open 20,000 files here, so the connections are held by
// child processes, each holding both ends of up to PerHolder loopback
// connections. The parent re-executes its own binary inside the namespace
// and, in the child, calls Hold:
//
//	// child (ip netns exec NS self -hold 5000):
//	os.Exit(netnslab.Hold(5000, os.Stdin, os.Stdout, os.Stderr))
//
//	// parent:
//	h, err := netnslab.Start(exec.Command("ip", "netns", "exec", ns, self, "-hold", "5000"))
//	err = h.WaitReady() // the connections are established
//	err = h.Stop()      // they are reset and the child has exited
package netnslab
