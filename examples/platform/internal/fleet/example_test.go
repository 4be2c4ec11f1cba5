package fleet_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/filestore"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// The platform's decisions on an exit node whose memory stands at 93 % in
// three readings, 30 seconds apart: it takes nobody new, its operator gets
// one notice, and its longest-unused own route is closed.
func Example() {
	dir, err := os.MkdirTemp("", "platform-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	seed := &store.SeedFile{
		Nodes: []routing.Node{{ID: "de-fra-1", Role: routing.RoleExit, Country: "DE", Price: 300}},
		Routes: []routing.Route{
			{ID: "r1", User: "alice", Key: "vpn-de", Node: "de-fra-1", Kind: routing.KindOwn,
				Start: now.Add(-5 * time.Hour), LastTraffic: now.Add(-4 * time.Hour)},
			{ID: "r2", User: "bob", Key: "vpn-de", Node: "de-fra-1", Kind: routing.KindOwn,
				Start: now.Add(-5 * time.Hour), LastTraffic: now.Add(-time.Minute)},
		},
	}
	p, err := filestore.Open(store.Config{StateDir: dir, Now: func() time.Time { return now }}, seed)
	if err != nil {
		panic(err)
	}
	f := fleet.New(p, nil)
	for range 3 {
		out, err := f.Report(ctx, overload.Reading{Node: "de-fra-1", At: now, MemoryUsedPercent: 93, CPUs: 4, ConntrackMax: 262144})
		if err != nil {
			panic(err)
		}
		fmt.Println("overloaded:", out.Overloaded)
		now = now.Add(30 * time.Second)
	}
	a, _ := f.Admit(ctx, "de-fra-1")
	fmt.Printf("admit: %v (%s)\n", a.Admit, a.Why)
	notices, _, _ := f.Notices(ctx, 0, 0)
	for _, n := range notices {
		fmt.Println("notice:", n.Text)
	}
	v, _ := f.View(ctx, "de-fra-1")
	for _, c := range v.Closed {
		fmt.Println(c.Action)
	}
	fmt.Println("routes left:", len(v.Routes))
	// Output:
	// overloaded: false
	// overloaded: false
	// overloaded: true
	// admit: false (the node is overloaded)
	// notice: de-fra-1 is overloaded: memory at 93 %
	// close route r1 of user alice: unused for 4h1m; unused own route on an overloaded exit
	// routes left: 1
}
