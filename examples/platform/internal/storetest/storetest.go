package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
)

// Store is a store under test, as its own tests give it to Run.
type Store struct {
	// Open returns the opener of a store of its own for test t (a new
	// directory, a new database).
	Open func(t *testing.T) Opener
	// Replicas says that two instances may serve one store at once
	// (PostgreSQL). Without it, a second instance is a restart: the
	// first is no longer used once it is opened (the file store is one
	// process).
	Replicas bool
}

// Opener opens an instance of the store on clock c, seeded with the
// route table seed; called again in one test, another instance on the
// same data.
type Opener func(c *platformtest.Clock, seed *store.SeedFile) store.Store

// Run runs the contract against st, one subtest a part: update, read
// and the look-ups (NodeStore), report (Report), the plan round
// (PlanDue), the pages (Pages) and the operators' receivers
// (Receivers).
func Run(t *testing.T, st Store) {
	for _, part := range []struct {
		name string
		test func(t *testing.T, open Opener, replicas bool)
	}{
		{"NodeStore", testNodeStore},
		{"Report", testReport},
		{"PlanDue", testPlanDue},
		{"PlanDueClockStep", testPlanDueClockStep},
		{"Pages", testPages},
		{"Receivers", testReceivers},
	} {
		t.Run(part.name, func(t *testing.T) { part.test(t, st.Open(t), st.Replicas) })
	}
}

// testNodeStore: an unknown node is ErrUnknownNode; what
// update's function changed is kept when it returns nil, across a
// restart (or on another replica), and nothing of it when it returns an
// error; updates of one node from many goroutines (and, on PostgreSQL,
// two replicas) never lose one another's change; read shows the node as
// last kept; NodeIDs lists every node; RouteNode finds a live route's
// node and ErrUnknown for none.
func testNodeStore(t *testing.T, open Opener, replicas bool) {
	c := &platformtest.Clock{T: platformtest.T0}
	a := open(c, platformtest.Seed())
	ctx := t.Context()
	maxUsers := func(st store.Store) int {
		t.Helper()
		var m int
		if err := st.Read(ctx, "x1", false, func(n *store.Node, _ time.Time) error { m = n.Info.MaxUsers; return nil }); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if err := a.Update(ctx, "nope", func(*store.Node, time.Time, store.NodeTx) error { return nil }); !errors.Is(err, store.ErrUnknownNode) {
		t.Errorf("update of an unknown node: %v, want errUnknownNode", err)
	}
	if err := a.Read(ctx, "nope", true, func(*store.Node, time.Time) error { return nil }); !errors.Is(err, store.ErrUnknownNode) {
		t.Errorf("read of an unknown node: %v, want errUnknownNode", err)
	}

	// Kept, and nothing of a failed update.
	if err := a.Update(ctx, "x1", func(n *store.Node, _ time.Time, _ store.NodeTx) error { n.Info.MaxUsers = 7; return nil }); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused")
	err := a.Update(ctx, "x1", func(n *store.Node, _ time.Time, _ store.NodeTx) error {
		n.Info.MaxUsers, n.NextRoute = 99, 1000
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
	b := open(c, platformtest.Seed())
	if m := maxUsers(b); m != 7 {
		t.Fatalf("another instance reads max_users %d, want 7", m)
	}
	// Many goroutines on one instance, and on PostgreSQL on two replicas
	// (the file store is one process: a second instance on its directory
	// is a restart, not a replica).
	writers := []store.Store{a, b}
	if !replicas {
		writers = []store.Store{a}
	}
	const each = 25
	before := maxUsers(a)
	var wg sync.WaitGroup
	errs := make(chan error, len(writers)*each)
	for _, st := range writers {
		for range each {
			wg.Go(func() {
				errs <- st.Update(ctx, "x1", func(n *store.Node, _ time.Time, _ store.NodeTx) error { n.Info.MaxUsers++; return nil })
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

	// NodeIDs: every node, sorted.
	if ids, err := b.NodeIDs(ctx); err != nil || len(ids) != 3 || ids[0] != "f1" || ids[2] != "x2" {
		t.Errorf("nodeIDs = %v, %v; want f1 x1 x2", ids, err)
	}

	// RouteNode, and RouteTaken under update.
	if id, err := a.RouteNode(ctx, "r-idle3"); err != nil || id != "x1" {
		t.Errorf("routeNode(r-idle3) = %q, %v; want x1", id, err)
	}
	if _, err := a.RouteNode(ctx, "r-none"); !errors.Is(err, store.ErrUnknown) {
		t.Errorf("routeNode of no route: %v, want errUnknown", err)
	}
	err = a.Update(ctx, "x2", func(_ *store.Node, _ time.Time, tx store.NodeTx) error {
		for id, want := range map[string]bool{"r-idle3": true, "r-none": false} {
			if taken, err := tx.RouteTaken(id); err != nil || taken != want {
				t.Errorf("routeTaken(%s) = %v, %v; want %v", id, taken, err, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readNode is node id of st as last kept, through read.
func readNode(t *testing.T, st store.Store, id string) *store.Node {
	t.Helper()
	var out *store.Node
	if err := st.Read(t.Context(), id, true, func(n *store.Node, _ time.Time) error { out = n; return nil }); err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	return out
}

// testReport: report runs take, then plan, on the node it locks;
// keeps what they changed, on a node it creates for a first reading too;
// keeps nothing of a reading take refuses, and no node created for it;
// returns the notice take decided, which the notices page then lists
// with the start in the node's event list; and reports of one node
// from many goroutines (and two replicas on PostgreSQL) lose none.
func testReport(t *testing.T, open Opener, replicas bool) {
	c := &platformtest.Clock{T: platformtest.T0}
	a := open(c, platformtest.Seed())
	ctx := t.Context()
	noPlan := func(*store.Node, time.Time, store.NodeTx) error { return nil }
	refused := errors.New("refused")

	// A refused first reading leaves no node; a counted one makes it.
	_, err := a.Report(ctx, "n-new", store.ReportFuncs(func(n *store.Node, _ time.Time) error { n.Readings = 7; return refused }, noPlan))
	if !errors.Is(err, refused) {
		t.Fatalf("a refused first reading: %v, want take's error", err)
	}
	if err := a.Read(ctx, "n-new", false, func(*store.Node, time.Time) error { return nil }); !errors.Is(err, store.ErrUnknownNode) {
		t.Errorf("the node of a refused first reading: %v, want errUnknownNode", err)
	}
	var planned int64
	_, err = a.Report(ctx, "n-new", store.ReportFuncs(func(n *store.Node, _ time.Time) error { n.Readings++; return nil },
		func(n *store.Node, _ time.Time, _ store.NodeTx) error { planned = n.Readings; return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if planned != 1 {
		t.Errorf("plan saw %d readings, want take's 1", planned)
	}
	// Nothing of a refused reading of a node kept.
	_, err = a.Report(ctx, "x1", store.ReportFuncs(func(n *store.Node, _ time.Time) error { n.Info.MaxUsers, n.Readings = 99, 99; return refused }, noPlan))
	if !errors.Is(err, refused) {
		t.Fatalf("a refused reading: %v", err)
	}
	b := open(c, platformtest.Seed())
	for _, st := range []store.Store{a, b} {
		if n := readNode(t, st, "n-new"); n.Readings != 1 {
			t.Errorf("n-new's readings %d, want 1", n.Readings)
		}
		if n := readNode(t, st, "x1"); n.Info.MaxUsers != 0 || n.Readings != 0 {
			t.Errorf("x1 after a refused reading: max_users %d, readings %d; want 0 0", n.Info.MaxUsers, n.Readings)
		}
	}

	// A reading that starts an overload: its notice is returned and
	// listed, its start is in the node's event list.
	f := fleet.New(a, nil)
	var out fleet.ReportOutcome
	for i, mem := range []float64{95, 95, 95} {
		c.Add(30 * time.Second)
		r := platformtest.Reading("x2", i+1, mem)
		r.At = c.Now()
		if out, err = f.Report(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if out.Notice == nil || out.Event == nil || out.Event.Kind != overload.Start {
		t.Fatalf("the third hot reading: %+v, want a start and its notice", out)
	}
	b = open(c, platformtest.Seed()) // the file store's b was opened before: a restart, now
	ns, _, err := b.Notices(ctx, 0, 0)
	if err != nil || len(ns) != 1 || ns[0].Node != "x2" || ns[0].Text != out.Notice.Text {
		t.Errorf("notices after x2's start: %+v, %v", ns, err)
	}
	evs, err := b.Events(ctx, "x2", 0, 0) // 0: all, as every page

	if err != nil || len(evs.Events) != 1 || evs.Events[0].Kind != overload.Start {
		t.Errorf("x2's events after its start: %+v, %v", evs, err)
	}

	// Reports of one node at once lose none of one another's changes.
	writers := []store.Store{a, b}
	if !replicas {
		writers = []store.Store{a}
	}
	const each = 25
	before := readNode(t, a, "n-new").NextRoute
	var wg sync.WaitGroup
	errs := make(chan error, len(writers)*each)
	for _, st := range writers {
		f := fleet.New(st, nil)
		for range each {
			wg.Go(func() {
				_, err := st.Report(ctx, "n-new", store.ReportFuncs(func(n *store.Node, _ time.Time) error { n.NextRoute++; return nil }, f.PlanNode))
				errs <- err
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
	if got, want := readNode(t, a, "n-new").NextRoute, before+len(writers)*each; got != want {
		t.Errorf("n-new's counter %d after %d reports from %d instances, want %d", got, len(writers)*each, len(writers), want)
	}
}

// testPlanDue: PlanDue runs plan on a registered node whose plan is
// due (here, after a pause), and keeps what it closed, across a restart
// or on a replica; a second round at the same time closes nothing more.
func testPlanDue(t *testing.T, open Opener, replicas bool) {
	c := &platformtest.Clock{T: platformtest.T0}
	a := open(c, platformtest.Seed())
	ctx := t.Context()
	// A paused node's routes unused for two hours close.
	if err := a.Update(ctx, "x1", func(n *store.Node, _ time.Time, _ store.NodeTx) error { n.Info.Paused = true; return nil }); err != nil {
		t.Fatal(err)
	}
	c.Add(time.Hour)
	var seen []string
	var mu sync.Mutex
	f := fleet.New(a, nil)
	if err := a.PlanDue(ctx, func(n *store.Node, now time.Time, tx store.NodeTx) error {
		mu.Lock()
		seen = append(seen, n.Info.ID)
		mu.Unlock()
		return f.PlanNode(n, now, tx)
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(seen, "x1") {
		t.Errorf("a round after x1's pause planned %v, not x1", seen)
	}
	b := open(c, platformtest.Seed())
	x1 := readNode(t, b, "x1")
	for _, id := range []string{"r-idle3", "r-idle5"} {
		if x1.Routes[id] != nil {
			t.Errorf("%s of paused x1 still live after a round", id)
		}
	}
	if x1.Routes["r-only"] == nil {
		t.Error("r-only, in use, closed")
	}
	closed := len(x1.Closed)
	if closed == 0 {
		t.Fatal("no closure kept")
	}
	if err := fleet.New(b, nil).PlanRound(ctx); err != nil {
		t.Fatal(err)
	}
	b = open(c, platformtest.Seed())
	if again := len(readNode(t, b, "x1").Closed); again != closed {
		t.Errorf("%d closures after a second round at the same time, want the first's %d", again, closed)
	}
	if ps, _, err := b.Plans(ctx, "", 0); err != nil || len(ps) != 1 || ps[0].Node != "x1" {
		t.Errorf("plans after x1's closures: %+v, %v; want x1's", ps, err)
	}
}

// testPlanDueClockStep: a node whose plans are due every round (a
// paused one, being emptied) is planned by the first round after the
// platform's clock stepped back an hour, and by every round a plan
// period apart after that, as before the step: the plan time the clock
// set before the step, now an hour ahead, does not put its plans off for
// the hour.
func testPlanDueClockStep(t *testing.T, open Opener, _ bool) {
	c := &platformtest.Clock{T: platformtest.T0}
	a := open(c, platformtest.Seed())
	ctx := t.Context()
	if err := a.Update(ctx, "x1", func(n *store.Node, _ time.Time, _ store.NodeTx) error { n.Info.Paused = true; return nil }); err != nil {
		t.Fatal(err)
	}
	f := fleet.New(a, nil)
	planned := func(when string) bool {
		t.Helper()
		var seen bool
		var mu sync.Mutex
		if err := a.PlanDue(ctx, func(n *store.Node, now time.Time, tx store.NodeTx) error {
			mu.Lock()
			seen = seen || n.Info.ID == "x1"
			mu.Unlock()
			return f.PlanNode(n, now, tx)
		}); err != nil {
			t.Fatalf("the round %s: %v", when, err)
		}
		return seen
	}
	c.Add(time.Minute)
	if !planned("a minute after the pause") {
		t.Fatal("paused x1 not planned a minute after its pause")
	}
	c.Add(-time.Hour)
	if !planned("just after the clock stepped back an hour") {
		t.Error("paused x1 not planned by the round just after the clock stepped back an hour")
	}
	for i := range 3 {
		c.Add(31 * time.Second)
		if !planned("after the step") {
			t.Errorf("paused x1 not planned by round %d after the step, %v later", i+1, time.Duration(i+1)*31*time.Second)
		}
	}
}

// testPages: EachNode pages through the nodes by id, each with its
// live routes, a page's last id the next page's cursor.
func testPages(t *testing.T, open Opener, replicas bool) {
	c := &platformtest.Clock{T: platformtest.T0}
	a := open(c, platformtest.Seed())
	ctx := t.Context()
	var ids []string
	routes := map[string]int{}
	page := func(after string, limit int) string {
		t.Helper()
		last, err := a.EachNode(ctx, after, limit, func(id string, n *store.Node, now time.Time, err error) {
			if err != nil || !now.Equal(platformtest.T0) {
				t.Errorf("node %s: %v at %v", id, err, now)
				return
			}
			ids = append(ids, id)
			routes[id] = len(n.Routes)
		})
		if err != nil {
			t.Fatal(err)
		}
		return last
	}
	if last := page("", 2); last != "x1" || !slices.Equal(ids, []string{"f1", "x1"}) {
		t.Errorf("the first page of 2: %v, last %q", ids, last)
	}
	if last := page("x1", 2); last != "x2" || !slices.Equal(ids, []string{"f1", "x1", "x2"}) {
		t.Errorf("the next page: %v, last %q", ids, last)
	}
	if last := page("x2", 2); last != "" || len(ids) != 3 {
		t.Errorf("past the last node: %v, last %q", ids, last)
	}
	if routes["x1"] != 6 || routes["x2"] != 1 || routes["f1"] != 1 {
		t.Errorf("live routes by node %v, want x1 6, x2 1, f1 1", routes)
	}
}

// testReceivers: UpdateReceiver keeps what fn changed, for an
// operator new to the store too, and nothing of a change fn refuses (no
// receiver made for it); OperatorReceivers lists what is kept, and
// OperatorReceiver gives one operator's (none for an operator without
// one), on another instance too; updates of one operator's receiver at
// once (and from two replicas on PostgreSQL) lose none.
func testReceivers(t *testing.T, open Opener, replicas bool) {
	c := &platformtest.Clock{T: platformtest.T0}
	a := open(c, platformtest.Seed())
	ctx := t.Context()
	refused := errors.New("refused")
	if err := a.UpdateReceiver(ctx, "alice", func(r *store.OperatorReceiver, _ time.Time) error {
		r.URL = "http://127.0.0.1:9/refused"
		return refused
	}); !errors.Is(err, refused) {
		t.Fatalf("a refused change: %v, want fn's error", err)
	}
	if ops, err := a.OperatorReceivers(ctx); err != nil || len(ops) != 0 {
		t.Fatalf("receivers after a refused change: %v, %v; want none", ops, err)
	}
	if r, ok, err := a.OperatorReceiver(ctx, "alice"); err != nil || ok {
		t.Fatalf("alice's receiver after a refused change: %+v, %v, %v; want none", r, ok, err)
	}
	if err := a.UpdateReceiver(ctx, "alice", func(r *store.OperatorReceiver, now time.Time) error {
		*r = store.OperatorReceiver{URL: "http://127.0.0.1:9/alice", Secrets: []store.OperatorSecret{{Key: []byte("0123456789abcdef01234567")}}, Created: now}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b := open(c, platformtest.Seed())
	ops, err := b.OperatorReceivers(ctx)
	if r := ops["alice"]; err != nil || len(ops) != 1 || r.URL != "http://127.0.0.1:9/alice" || string(r.Secrets[0].Key) != "0123456789abcdef01234567" || !r.Created.Equal(platformtest.T0) {
		t.Fatalf("another instance's receivers: %+v, %v", ops, err)
	}
	if r, ok, err := b.OperatorReceiver(ctx, "alice"); err != nil || !ok || r.URL != ops["alice"].URL || len(r.Secrets) != 1 || !r.Created.Equal(platformtest.T0) {
		t.Fatalf("another instance's receiver of alice: %+v, %v, %v; want %+v", r, ok, err, ops["alice"])
	}
	if r, ok, err := b.OperatorReceiver(ctx, "bob"); err != nil || ok {
		t.Fatalf("the receiver of bob, who has none: %+v, %v, %v", r, ok, err)
	}
	writers := []store.Store{a, b}
	if !replicas {
		writers = []store.Store{b} // a restart: the first instance is gone
	}
	const each = 20
	var wg sync.WaitGroup
	errs := make(chan error, len(writers)*each)
	for _, st := range writers {
		for range each {
			wg.Go(func() {
				errs <- st.UpdateReceiver(ctx, "alice", func(r *store.OperatorReceiver, _ time.Time) error {
					r.Secrets = append(r.Secrets, store.OperatorSecret{Key: []byte{1}})
					return nil
				})
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
	ops, err = writers[0].OperatorReceivers(ctx)
	if got, want := len(ops["alice"].Secrets), 1+len(writers)*each; err != nil || got != want {
		t.Errorf("%d secrets after %d appends from %d instances, want %d (%v)", got, len(writers)*each, len(writers), want, err)
	}
	if r, _, err := writers[0].OperatorReceiver(ctx, "alice"); err != nil || len(r.Secrets) != 1+len(writers)*each {
		t.Errorf("alice's receiver after the appends: %d secrets, %v; want %d", len(r.Secrets), err, 1+len(writers)*each)
	}
}
