package main

import (
	"fmt"

	"github.com/proofkit/nodekit/pinproxy"
)

// What the service's stats timer logs (and /proxy/stats serves as JSON)
// before any client came: each upstream in order of preference, nothing
// dialed yet, so the state of each is unknown (the metrics say not up).
func Example_stats() {
	p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{"eu-01.example:9333", "usa-01.example:9333"}})
	if err != nil {
		panic(err)
	}
	t := p.Totals()
	fmt.Printf("live=%d accepted=%d moves=%d\n", t.Live, t.Accepted, t.Moves)
	for _, u := range p.Stats() {
		fmt.Printf("%s live=%d dials=%d state=%s\n", u.Addr, u.Live, u.Dials, u.State)
	}
	// Output:
	// live=0 accepted=0 moves=0
	// eu-01.example:9333 live=0 dials=0 state=unknown
	// usa-01.example:9333 live=0 dials=0 state=unknown
}
