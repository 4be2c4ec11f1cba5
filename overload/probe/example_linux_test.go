package probe_test

import (
	"context"
	"fmt"
	"log"
	"slices"

	"github.com/proofkit/nodekit/overload/probe"
)

// An agent in a container reads the host's memory, load and conntrack
// table from a bind mount of the host's /proc (here a copy in testdata).
func ExampleNew() {
	p, err := probe.New(probe.Config{ProcRoot: "testdata/proc", Node: "exit-fra-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	r, err := p.Read(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: memory at %.1f %%, load %.2f\n", r.Node, r.MemoryUsedPercent, r.Load15)
	fmt.Printf("connection table at %d of %d\n", r.ConntrackEntries, r.ConntrackMax)
	slices.Sort(r.Missing)
	fmt.Println("missing:", r.Missing)
	fmt.Println("first note:", r.Notes[0])
	// Output:
	// exit-fra-1: memory at 4.2 %, load 2.97
	// connection table at 222822 of 262144
	// missing: [bandwidth conntrack_drops listen_drops]
	// first note: first reading: no deltas yet
}
