package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// The tests in this file run the built platform as real processes: two
// replicas on one PostgreSQL database, or one process on a state
// directory, and send them requests over loopback as clients would.

// platformBuild is this package's command, built once per test run and
// removed by TestMain.
var platformBuild = testkit.Build{Pkgs: []string{"."}}

// cluster is the throwaway PostgreSQL cluster of this package's tests; nil
// without PostgreSQL (the tests needing it skip).
var cluster *pgtest.Cluster

func TestMain(m *testing.M) {
	code := pgtest.Main(m, &cluster)
	platformBuild.Clean()
	os.Exit(code)
}

// platformBinary builds this package's command once per test run.
func platformBinary(t testing.TB) string {
	t.Helper()
	return platformBuild.Bin(t, "platform")
}

// replica is one running platform process.
type replica struct {
	t    testing.TB
	base string
	args []string
	proc *testkit.Proc
}

var fleetClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
}

// startReplica starts the built platform with args (beside -listen and
// -token-file) and waits for it to answer /healthz.
func startReplica(t testing.TB, args ...string) *replica {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tok, []byte(platformtest.TestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testkit.FreeAddr(t)
	all := append([]string{"-listen", addr, "-token-file", tok}, args...)
	r := &replica{t: t, base: "http://" + addr, args: all}
	r.proc = testkit.StartProc(t, exec.Command(platformBinary(t), all...), nil)
	r.waitUp()
	return r
}

func (r *replica) waitUp() {
	r.t.Helper()
	testkit.WaitForWithin(r.t, time.Minute, "the platform at "+r.base+" to answer /healthz", func() bool {
		select {
		case <-r.proc.Done():
			r.t.Fatalf("the platform ended:\n%s", r.proc.Log.String())
		default:
		}
		resp, err := fleetClient.Get(r.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// do sends body as JSON (none when nil) with the admin's token and
// returns the status and the answer; a request that got no answer is
// status 0 with the error as the answer.
func (r *replica) do(method, path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			panic(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.base+path, rd)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+platformtest.TestToken)
	resp, err := fleetClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// get decodes a 200 answer to GET path into out.
func (r *replica) get(path string, out any) {
	r.t.Helper()
	code, b := r.do("GET", path, nil)
	if code != 200 {
		r.t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		r.t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

func (r *replica) View(id string) fleet.NodeView {
	r.t.Helper()
	var v fleet.NodeView
	r.get("/nodes/"+id, &v)
	return v
}

// replicaSet is what the suite runs against: two targets for the two requests
// of a pair (two replicas on one database, or one process twice).
type replicaSet struct {
	name string
	a, b *replica
	url  string // the database; "" for the file store
	// start starts another replica with extra flags on the same store.
	start func(extra ...string) *replica
	all   []*replica // every replica started
}

// writeSeed writes s to a temporary file for -routes.
func writeSeed(t testing.TB, s *store.SeedFile) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// eachFleet runs test on two replicas on PostgreSQL (skipped without it)
// and on one process on the file store, each started with seed and flags.
func eachFleet(t *testing.T, seed *store.SeedFile, flags []string, test func(t *testing.T, f *replicaSet)) {
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Need(t, cluster).NewDatabase(t)
		routes := writeSeed(t, seed)
		start := func(extra ...string) *replica {
			return startReplica(t, append(append([]string{"-db", url, "-routes", routes}, flags...), extra...)...)
		}
		f := &replicaSet{name: "postgres", url: url}
		f.start = func(extra ...string) *replica {
			r := start(extra...)
			f.all = append(f.all, r)
			return r
		}
		f.a, f.b = f.start(), f.start()
		test(t, f)
	})
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		routes := writeSeed(t, seed)
		start := func(extra ...string) *replica {
			return startReplica(t, append(append([]string{"-state-dir", dir, "-routes", routes}, flags...), extra...)...)
		}
		f := &replicaSet{name: "file", start: start}
		f.a = start()
		f.b, f.all = f.a, []*replica{f.a}
		test(t, f)
	})
}

// answer is one request's outcome in a pair.
type answer struct {
	code int
	body []byte
}

// pair runs x and y at once (both released together) and returns their
// answers.
func pair(x, y func() answer) (answer, answer) {
	var ax, ay answer
	var wg sync.WaitGroup
	gate := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); <-gate; ax = x() }()
	go func() { defer wg.Done(); <-gate; ay = y() }()
	close(gate)
	wg.Wait()
	return ax, ay
}

// trials is how many times each pair of requests meets.
const trials = 100

// ledger is what the replicas acknowledged in a suite, to be checked
// against what they store.
//
// A request answered 503 may still commit (its deadline passed while the
// commit was on its way): it is counted as one that may have taken
// effect, so what is stored is between what was acknowledged and that
// plus what may have been.
type ledger struct {
	mu           sync.Mutex
	charged      map[string]uint64 // acknowledged bytes by route
	maybeCharged map[string]uint64 // bytes answered 503, by route
	readings     map[string]int    // readings acknowledged as counted, by node
	maybeRead    map[string]int    // readings answered 503, by node
	opened       map[string]int    // routes acknowledged as opened, by node
}

func newLedger() *ledger {
	return &ledger{charged: map[string]uint64{}, maybeCharged: map[string]uint64{}, readings: map[string]int{},
		maybeRead: map[string]int{}, opened: map[string]int{}}
}

// ack records a's answer to req and fails t on an answer no client
// should get (503 is allowed: the request may be retried).
func (l *ledger) ack(t *testing.T, req any, a answer) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	bad := func() { t.Errorf("%T %+v: %d %s", req, req, a.code, a.body) }
	if a.code == 503 {
		switch r := req.(type) {
		case fleet.TrafficRequest:
			l.maybeCharged[r.Route] += r.Bytes
		case overload.Reading:
			l.maybeRead[r.Node]++
		case fleet.OpenRequest:
			l.opened[r.Node+" maybe"]++
		}
		return
	}
	switch r := req.(type) {
	case fleet.TrafficRequest:
		switch a.code {
		case 200:
			l.charged[r.Route] += r.Bytes
		case 404:
		default:
			bad()
		}
	case overload.Reading:
		var out struct {
			Duplicate bool `json:"duplicate"`
		}
		if a.code != 200 || json.Unmarshal(a.body, &out) != nil {
			bad()
			return
		}
		if !out.Duplicate {
			l.readings[r.Node]++
		}
	case fleet.OpenRequest:
		switch a.code {
		case 201:
			l.opened[r.Node]++
		case 409:
		default:
			bad()
		}
	case fleet.PriceRequest:
		if a.code != 204 {
			bad()
		}
	}
}

// send returns a pair's half: req sent to r, its answer recorded.
func (l *ledger) send(t *testing.T, r *replica, req any) func() answer {
	path := map[string]string{"fleet.TrafficRequest": "/traffic", "overload.Reading": "/report",
		"fleet.OpenRequest": "/routes", "fleet.PriceRequest": "/price"}[fmt.Sprintf("%T", req)]
	return func() answer {
		code, b := r.do("POST", path, req)
		a := answer{code, b}
		l.ack(t, req, a)
		return a
	}
}

// pausedRoutes is how many unused routes each paused node of the pairs
// suite has.
const pausedRoutes = 3

// runB is a second agent's run, beside RunID.
const runB = "fedcba9876543210fedcba9876543210"

// pairsSeed is the suite's fleet: for each pair the nodes and routes its
// trials meet on.
func pairsSeed() *store.SeedFile {
	now := time.Now()
	s := &store.SeedFile{}
	node := func(id string, paused bool, maxUsers int) {
		s.Nodes = append(s.Nodes, routing.Node{ID: id, Role: routing.RoleExit, Country: "DE", Price: 100, Paused: paused, MaxUsers: maxUsers})
	}
	rt := func(id, node, user string, idle time.Duration) {
		s.Routes = append(s.Routes, routing.Route{ID: id, User: user, Key: "k", Node: node, Kind: routing.KindOwn,
			Start: now.Add(-8 * time.Hour), LastTraffic: now.Add(-idle)})
	}
	node("tt", false, 0)
	rt("tt-r", "tt", "u", 0)
	node("rt", false, 0)
	rt("rt-r", "rt", "u", 0)
	node("pr", false, 0)
	node("ev", false, 0)
	for i := range trials {
		node(fmt.Sprintf("rr-%d", i), false, 1)
		id := fmt.Sprintf("rep-%d", i)
		node(id, true, 0)
		for j := range pausedRoutes {
			rt(fmt.Sprintf("%s-r%d", id, j), id, fmt.Sprintf("u%d", j), 3*time.Hour)
		}
		id = fmt.Sprintf("tc-%d", i)
		node(id, true, 0)
		rt(id+"-r", id, "u", 3*time.Hour)
	}
	return s
}

// TestFleetPairs: every pair of mutating requests on one node at once,
// trials times each, on two replicas of the built platform on one
// PostgreSQL database (and on one process on the file store); then
// what the replicas acknowledged is checked against what they store.
func TestFleetPairs(t *testing.T) {
	eachFleet(t, pairsSeed(), []string{"-plan-every", "1h"}, func(t *testing.T, f *replicaSet) {
		if f.url != "" {
			platformtest.PGExec(t, f.url, closureAudit)
		}
		l := newLedger()
		run := func(name string, trial func(i int)) {
			t.Run(name, func(t *testing.T) {
				for i := range trials {
					trial(i)
				}
			})
		}
		run("traffic×traffic", func(int) {
			pair(l.send(t, f.a, fleet.TrafficRequest{Route: "tt-r", Bytes: 1000}), l.send(t, f.b, fleet.TrafficRequest{Route: "tt-r", Bytes: 1000}))
		})
		run("routes×routes", func(i int) {
			id := fmt.Sprintf("rr-%d", i)
			pair(l.send(t, f.a, fleet.OpenRequest{Node: id, User: "ua", Key: "k"}), l.send(t, f.b, fleet.OpenRequest{Node: id, User: "ub", Key: "k"}))
		})
		var evReadings []overload.Reading
		run("report×report", func(i int) {
			// Two agents' runs on a paused node whose unused routes the
			// plan closes; then a reading and its retry at once.
			id := fmt.Sprintf("rep-%d", i)
			a, b := platformtest.Reading(id, 1, 50), platformtest.Reading(id, 1, 50)
			b.Run = runB
			pair(l.send(t, f.a, a), l.send(t, f.b, b))
			r := platformtest.Reading("ev", i+1, platformtest.MemoryPattern(i))
			evReadings = append(evReadings, r)
			pair(l.send(t, f.a, r), l.send(t, f.b, r))
		})
		run("report×traffic", func(i int) {
			pair(l.send(t, f.a, fleet.TrafficRequest{Route: "rt-r", Bytes: 1000}), l.send(t, f.b, platformtest.Reading("rt", i+1, 50)))
		})
		run("traffic×closure", func(i int) {
			id := fmt.Sprintf("tc-%d", i)
			pair(l.send(t, f.a, fleet.TrafficRequest{Route: id + "-r", Bytes: 1000}), l.send(t, f.b, platformtest.Reading(id, 1, 50)))
		})
		run("price×report", func(i int) {
			price := fleet.PriceRequest{Node: "pr", Price: 100 + pricingPrice(i)}
			x, _ := pair(l.send(t, f.a, price), l.send(t, f.b, platformtest.Reading("pr", i+1, 50)))
			if v := f.a.View("pr"); x.code == 204 && v.Price != price.Price {
				t.Errorf("price of pr %d after a POST /price of %d was acknowledged", v.Price, price.Price)
			}
		})
		run("first reading×first reading", func(i int) {
			r := platformtest.Reading(fmt.Sprintf("ff-%d", i), 1, 50)
			pair(l.send(t, f.a, r), l.send(t, f.b, r))
		})
		t.Run("seeding×first reading", func(t *testing.T) {
			if f.url == "" {
				t.Skip("the file store seeds in one process, before it serves")
			}
			seed := pairsSeed()
			for i := range trials {
				id := fmt.Sprintf("sf-%d", i)
				seed.Nodes = append(seed.Nodes, routing.Node{ID: id, Role: routing.RoleExit, Country: "DE", Price: 100})
				seed.Routes = append(seed.Routes, routing.Route{ID: id + "-r", User: "u", Key: "k", Node: id, Kind: routing.KindOwn, Start: time.Now()})
			}
			routes := writeSeed(t, seed)
			// The first readings go out while a third replica starts and
			// seeds the nodes.
			sent := make(chan struct{})
			go func() {
				defer close(sent)
				for i := range trials {
					r := platformtest.Reading(fmt.Sprintf("sf-%d", i), 1, 50)
					pair(l.send(t, f.a, r), l.send(t, f.b, r))
				}
			}()
			c := startReplica(t, "-db", f.url, "-routes", routes, "-plan-every", "1h")
			<-sent
			for i := range trials {
				id := fmt.Sprintf("sf-%d", i)
				v := c.View(id)
				if !v.Registered || len(v.Routes) != 1 {
					t.Errorf("node %s after seeding and its first reading at once: registered %v, %d routes, want registered with its 1", id, v.Registered, len(v.Routes))
				}
			}
		})
		checkLedger(t, f, l, evReadings)
	})
}

func pricingPrice(i int) pricing.Price { return pricing.Price(i) }

// closureAudit records, by a trigger, every committed closure of a route
// and every write to a closed route's row.
const closureAudit = `
CREATE TABLE closure_audit (route text NOT NULL, what text NOT NULL);
CREATE FUNCTION closure_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF OLD.closed_at IS NOT NULL THEN
		INSERT INTO closure_audit VALUES (NEW.id, 'closed row written');
	ELSIF NEW.closed_at IS NOT NULL THEN
		INSERT INTO closure_audit VALUES (NEW.id, 'closed');
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER closure_audit AFTER UPDATE ON routes FOR EACH ROW EXECUTE FUNCTION closure_audit();
`

// checkLedger checks the invariants of the suite over every node: every
// acknowledged charge stored once, max_users never exceeded, a route
// closed at most once and never as unused after acknowledged traffic,
// every acknowledged reading counted once, one notice an hour, every
// start and end once.
func checkLedger(t *testing.T, f *replicaSet, l *ledger, evReadings []overload.Reading) {
	t.Helper()
	var all []json.RawMessage
	f.a.get("/nodes", &all)
	earned := map[string]uint64{}
	for _, raw := range all {
		var id struct {
			ID string `json:"id"`
		}
		json.Unmarshal(raw, &id)
		v := f.a.View(id.ID)
		if v.MaxUsers > 0 && v.LiveUsers > v.MaxUsers {
			t.Errorf("node %s: %d users, max_users %d", v.ID, v.LiveUsers, v.MaxUsers)
		}
		if got, want := v.Readings, int64(l.readings[v.ID]); got < want || got > want+int64(l.maybeRead[v.ID]) {
			t.Errorf("node %s: %d readings counted, %d acknowledged (and %d answered 503)", v.ID, got, want, l.maybeRead[v.ID])
		}
		for _, rt := range v.Routes {
			earned[rt.Route.ID] += rt.Earned.Bytes
		}
		seen := map[string]bool{}
		for _, c := range v.Closed {
			rid := c.Action.Route.ID
			if seen[rid] {
				t.Errorf("node %s: route %s closed twice", v.ID, rid)
			}
			seen[rid] = true
			earned[rid] += c.Earned.Bytes
			if r := c.Action.Reason; (r == routing.ReasonUnused || r == routing.ReasonDrain) && l.charged[rid] > 0 {
				t.Errorf("node %s: route %s closed as unused after %d bytes of acknowledged traffic", v.ID, rid, l.charged[rid])
			}
		}
	}
	for id, n := range l.readings {
		if code, b := f.a.do("GET", "/nodes/"+id, nil); n > 0 && code != 200 {
			t.Errorf("node %s: %d readings acknowledged, GET /nodes/%s: %d %s", id, n, id, code, b)
		}
	}
	for rid, want := range l.charged {
		if got := earned[rid]; got < want || got > want+l.maybeCharged[rid] {
			t.Errorf("route %s: %d bytes stored, %d acknowledged (and %d answered 503)", rid, got, want, l.maybeCharged[rid])
		}
	}
	// Each closure is carried out (logged) once, by the replica that
	// committed it.
	logged := map[string]int{}
	for _, r := range f.all {
		for line := range strings.SplitSeq(r.proc.Log.String(), "\n") {
			if strings.Contains(line, `msg="closing route"`) {
				if _, rest, ok := strings.Cut(line, " route="); ok {
					rid, _, _ := strings.Cut(rest, " ")
					logged[rid]++
				}
			}
		}
	}
	if len(logged) == 0 {
		t.Error("no closure logged: the suite closes routes on paused nodes")
	}
	for rid, n := range logged {
		if n != 1 {
			t.Errorf("route %s: closing logged %d times, want once", rid, n)
		}
	}
	if f.url != "" {
		ctx := t.Context()
		rows, err := platformtest.PGConn(t, f.url).Query(ctx, `SELECT route, what, count(*) FROM closure_audit GROUP BY route, what HAVING what <> 'closed' OR count(*) > 1`)
		if err != nil {
			t.Fatal(err)
		}
		var rid, what string
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&rid, &what, &n}, func() error {
			t.Errorf("route %s: %s %d times", rid, what, n)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// One tracker fed the acknowledged readings of ev in order makes the
	// events and notices stored.
	want, wantNotices := platformtest.OneTracker(t, "ev", evReadings)
	var page store.EventPage
	f.a.get("/nodes/ev/events?limit=1000", &page)
	if l.maybeRead["ev"] > 0 {
		t.Logf("node ev: %d readings answered 503: its events are not compared with one tracker's", l.maybeRead["ev"])
		want = want[:0]
		for _, e := range page.Events {
			want = append(want, e.Event)
		}
	}
	for i, e := range page.Events { // every start and end once: they alternate
		if kind := []overload.EventKind{overload.Start, overload.End}[i%2]; e.Kind != kind {
			t.Errorf("node ev: event %d is a %s, want a %s", i, e.Kind, kind)
		}
	}
	for _, d := range platformtest.DiffEvents("ev", page.Events, want) {
		t.Error(d)
	}
	var notices []overload.Notice
	f.a.get("/notices", &notices)
	last := map[string]time.Time{}
	count := map[string]int{}
	for _, n := range notices {
		if at, ok := last[n.Node]; ok && n.At.Sub(at) < time.Hour {
			t.Errorf("node %s: notices at %v and %v, less than an hour apart", n.Node, at, n.At)
		}
		last[n.Node] = n.At
		count[n.Node]++
	}
	if count["ev"] != wantNotices {
		t.Errorf("node ev: %d notices, want %d", count["ev"], wantNotices)
	}
}

// TestFleetRoutesPlanRound: routes opened while both replicas' plan
// rounds run (every 100 ms) are every one kept, and the rounds close
// none of them.
func TestFleetRoutesPlanRound(t *testing.T) {
	const nodes = 5
	seed := &store.SeedFile{}
	for i := range nodes {
		seed.Nodes = append(seed.Nodes, routing.Node{ID: fmt.Sprintf("rp-%d", i), Role: routing.RoleExit, Country: "DE", Price: 100})
	}
	eachFleet(t, seed, []string{"-plan-every", "100ms"}, func(t *testing.T, f *replicaSet) {
		l := newLedger()
		for i := range trials {
			r := f.a
			if i%2 == 1 {
				r = f.b
			}
			l.send(t, r, fleet.OpenRequest{Node: fmt.Sprintf("rp-%d", i%nodes), User: fmt.Sprintf("u%d", i), Key: "k"})()
		}
		for i := range nodes {
			id := fmt.Sprintf("rp-%d", i)
			v := f.a.View(id)
			if len(v.Routes) != l.opened[id] || len(v.Closed) != 0 {
				t.Errorf("node %s: %d live routes and %d closed, %d opened", id, len(v.Routes), len(v.Closed), l.opened[id])
			}
		}
	})
}
