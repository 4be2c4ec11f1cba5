package main

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// TestNodeStoreConformance is the nodeStore contract the use cases rely
// on, run against every store: an unknown node is errUnknownNode; what
// update's function changed is kept when it returns nil, across a
// restart (or on another replica), and nothing of it when it returns an
// error; updates of one node from many goroutines (and, on PostgreSQL,
// two replicas) never lose one another's change; read shows the node as
// last kept; nodeIDs lists every node; routeNode finds a live route's
// node and errUnknown for none.
func TestNodeStoreConformance(t *testing.T) { eachStore(t, testNodeStoreConformance) }

func testNodeStoreConformance(t *testing.T, open opener) {
	c := &clock{t: t0}
	a := open(c, testSeed()).svc
	ctx := t.Context()
	maxUsers := func(st store) int {
		t.Helper()
		var m int
		if err := st.read(ctx, "x1", false, func(n *node, _ time.Time) error { m = n.info.MaxUsers; return nil }); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if err := a.update(ctx, "nope", func(*node, time.Time, nodeTx) error { return nil }); !errors.Is(err, errUnknownNode) {
		t.Errorf("update of an unknown node: %v, want errUnknownNode", err)
	}
	if err := a.read(ctx, "nope", true, func(*node, time.Time) error { return nil }); !errors.Is(err, errUnknownNode) {
		t.Errorf("read of an unknown node: %v, want errUnknownNode", err)
	}

	// Kept, and nothing of a failed update.
	if err := a.update(ctx, "x1", func(n *node, _ time.Time, _ nodeTx) error { n.info.MaxUsers = 7; return nil }); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused")
	err := a.update(ctx, "x1", func(n *node, _ time.Time, _ nodeTx) error {
		n.info.MaxUsers, n.nextRoute = 99, 1000
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("a failed update: %v", err)
	}
	if m := maxUsers(a); m != 7 {
		t.Fatalf("max_users %d after a failed update, want the kept 7", m)
	}

	// Another instance on the same store (a restart, or a replica) reads
	// what was kept, and updates from both never lose one another's.
	b := open(c, testSeed()).svc
	if m := maxUsers(b); m != 7 {
		t.Fatalf("another instance reads max_users %d, want 7", m)
	}
	// Many goroutines on one instance, and on PostgreSQL on two replicas
	// (the file store is one process: a second instance on its directory
	// is a restart, not a replica).
	writers := []store{a, b}
	if _, ok := a.(*platform); ok {
		writers = []store{a}
	}
	const each = 25
	before := maxUsers(a)
	var wg sync.WaitGroup
	errs := make(chan error, len(writers)*each)
	for _, st := range writers {
		for range each {
			wg.Go(func() {
				errs <- st.update(ctx, "x1", func(n *node, _ time.Time, _ nodeTx) error { n.info.MaxUsers++; return nil })
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if m, want := maxUsers(a), before+len(writers)*each; m != want {
		t.Errorf("max_users %d after %d increments from %d instances, want %d", m, len(writers)*each, len(writers), want)
	}

	// nodeIDs: every node, sorted.
	if ids, err := b.nodeIDs(ctx); err != nil || len(ids) != 3 || ids[0] != "f1" || ids[2] != "x2" {
		t.Errorf("nodeIDs = %v, %v; want f1 x1 x2", ids, err)
	}

	// routeNode, and routeTaken under update.
	if id, err := a.routeNode(ctx, "r-idle3"); err != nil || id != "x1" {
		t.Errorf("routeNode(r-idle3) = %q, %v; want x1", id, err)
	}
	if _, err := a.routeNode(ctx, "r-none"); !errors.Is(err, errUnknown) {
		t.Errorf("routeNode of no route: %v, want errUnknown", err)
	}
	err = a.update(ctx, "x2", func(_ *node, _ time.Time, tx nodeTx) error {
		for id, want := range map[string]bool{"r-idle3": true, "r-none": false} {
			if taken, err := tx.routeTaken(id); err != nil || taken != want {
				t.Errorf("routeTaken(%s) = %v, %v; want %v", id, taken, err, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
