package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// TestPGTwoReplicasOneTracker: every reading of a node sent to two
// replicas at once (a retry racing the original) is counted once, and the
// events and notices are those of one tracker fed the readings in order.
func TestPGTwoReplicasOneTracker(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	a, b := servePG(t, url, c, platformtest.Seed()), servePG(t, url, c, platformtest.Seed())
	var sent []overload.Reading
	const n = 60
	for i := range n {
		r := overload.Reading{Version: 2, Node: "x1", Run: "0123456789abcdef0123456789abcdef", Seq: uint64(i + 1),
			At: c.Now(), MemoryUsedPercent: platformtest.MemoryPattern(i), CPUs: 4, ConntrackMax: 262144}
		sent = append(sent, r)
		type answer struct {
			code int
			dup  bool
		}
		answers := make(chan answer, 2)
		for _, tp := range []*apitest.Platform{a, b} {
			go func() {
				code, _, dup := tp.Post("/report", r)
				answers <- answer{code, dup}
			}()
		}
		x, y := <-answers, <-answers
		if x.code != 200 || y.code != 200 || x.dup == y.dup {
			t.Fatalf("reading %d to both replicas: %+v and %+v, want 200 twice, one a duplicate", i, x, y)
		}
		c.Add(30 * time.Second)
	}
	if v := a.Node("x1"); v.Readings != n {
		t.Fatalf("%d readings counted, want %d", v.Readings, n)
	}
	wantEvents, wantNotices := platformtest.OneTracker(t, "x1", sent)
	if diffs := platformtest.DiffEvents("x1", b.AllEvents("x1", 3), wantEvents); diffs != nil {
		t.Fatal(strings.Join(diffs, "\n"))
	}
	var notices []overload.Notice
	a.Do("GET", "/notices", nil, &notices)
	if len(notices) != wantNotices {
		t.Fatalf("%d notices, want %d (one an hour)", len(notices), wantNotices)
	}
}

// TestPGEventsKeepEveryOne: the events table keeps every start and end,
// beyond the tracker's own list, paged oldest first.
func TestPGEventsKeepEveryOne(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	p, err := Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t), Limits: overload.Limits{MaxEvents: 2}}, Options{PlanEvery: 30 * time.Second}, platformtest.Seed())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	tp := apitest.Serve(t, c, p)
	for i := range 70 {
		if code := tp.Read("x1", platformtest.MemoryPattern(i)); code != 200 {
			t.Fatalf("reading %d: %d", i, code)
		}
		c.Add(30 * time.Second)
	}
	if got := len(tp.Node("x1").Events); got != 2 {
		t.Fatalf("the tracker keeps %d events, want 2", got)
	}
	evs := tp.AllEvents("x1", 3)
	if len(evs) != 20 {
		t.Fatalf("%d events in the table, want 20 (10 overloads)", len(evs))
	}
	for i, e := range evs {
		if want := []overload.EventKind{overload.Start, overload.End}[i%2]; e.Kind != want {
			t.Fatalf("event %d is %s, want %s", i, e.Kind, want)
		}
	}
	if code := tp.Do("GET", "/nodes/nobody/events", nil, nil); code != 404 {
		t.Fatalf("events of an unknown node: %d, want 404", code)
	}
	if code := tp.Do("GET", "/nodes/x1/events?limit=0", nil, nil); code != 400 {
		t.Fatalf("limit=0: %d, want 400", code)
	}
}

// TestUnsavableNode: a node whose state cannot be saved fails its own
// requests, with a clear error, and nothing else: other nodes report, the
// fleet's views answer, plan rounds go on.
func TestUnsavableNode(t *testing.T) {
	check := func(t *testing.T, tp *apitest.Platform) {
		code, reason, _ := tp.Post("/report", overload.Reading{Node: "x2", At: tp.Clock.Now(), MemoryUsedPercent: 95, CPUs: 4, ConntrackMax: 1})
		if code != 500 || reason != api.ReasonUnsaved {
			t.Fatalf("report of the unsavable node: %d %q, want 500 %q", code, reason, api.ReasonUnsaved)
		}
		if code := tp.Read("x1", 95); code != 200 {
			t.Fatalf("report of another node: %d, want 200", code)
		}
		for _, path := range []string{"/nodes", "/notices", "/plans", "/nodes/x1", "/admit?node=x1"} {
			if code := tp.Do("GET", path, nil, nil); code != 200 {
				t.Fatalf("GET %s: %d, want 200", path, code)
			}
		}
		if v := tp.Node("x2"); v.Readings != 0 {
			t.Fatalf("x2 shows %d readings; the one that was not saved must not count", v.Readings)
		}
		tp.Clock.Add(time.Minute)
		// The round goes on past x2 and says it was not planned.
		if err := fleet.New(tp.Svc, nil).PlanRound(t.Context()); err != nil && !strings.Contains(err.Error(), "(x2)") {
			t.Fatalf("plan round: %v", err)
		}
	}
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		tp := apitest.NewPlatform(t, dir, &platformtest.Clock{T: platformtest.T0}, platformtest.Seed())
		// x2's file becomes a directory that is not empty: renaming over
		// it fails.
		path := filepath.Join(dir, "x2.json")
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(path, "in-the-way"), 0o700); err != nil {
			t.Fatal(err)
		}
		check(t, tp)
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Need(t, cluster).NewDatabase(t)
		tp := servePG(t, url, &platformtest.Clock{T: platformtest.T0}, platformtest.Seed())
		platformtest.PGExec(t, url, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'node % refused by the test', NEW.id; END $$;
			CREATE TRIGGER refuse_x2 BEFORE UPDATE ON nodes FOR EACH ROW WHEN (NEW.id = 'x2') EXECUTE FUNCTION refuse()`)
		check(t, tp)
	})
}

// TestPGRestart: while PostgreSQL restarts (pg_ctl restart), reports get
// 503 and are retried; the platform recovers by itself, and every reading
// is counted once.
func TestPGRestart(t *testing.T) {
	cl := pgtest.Need(t, cluster)
	url := cl.NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	tp := servePG(t, url, c, platformtest.Seed())
	statuses := map[int]int{}
	sent := 0
	restarted := make(chan error, 1)
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; ; i++ {
		if i == 20 {
			go func() { restarted <- cl.Restart() }()
		}
		r := overload.Reading{Version: 2, Node: "x1", Run: "0123456789abcdef0123456789abcdef", Seq: uint64(i + 1),
			At: c.Now(), MemoryUsedPercent: platformtest.MemoryPattern(i), CPUs: 4, ConntrackMax: 262144}
		for {
			code, reason, _ := tp.Post("/report", r)
			statuses[code]++
			if code == 200 {
				break
			}
			if code != 503 || reason != api.ReasonUnavailable {
				t.Fatalf("reading %d: %d %q, want 200, or 503 %q while the database restarts", i, code, reason, api.ReasonUnavailable)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no recovery within 2 minutes: %v", statuses)
			}
			time.Sleep(50 * time.Millisecond)
		}
		sent++
		c.Add(30 * time.Second)
		if i > 20 && len(restarted) > 0 && statuses[503] > 0 {
			break
		}
		if i > 20 && len(restarted) > 0 && i > 2000 {
			t.Fatalf("the restart gave no 503: %v", statuses)
		}
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	// Once more after the restart: answered at the first attempt.
	for i := range 5 {
		r := overload.Reading{Version: 2, Node: "x1", Run: "0123456789abcdef0123456789abcdef", Seq: uint64(sent + 1),
			At: c.Now(), MemoryUsedPercent: platformtest.MemoryPattern(sent), CPUs: 4, ConntrackMax: 262144}
		code, reason, _ := tp.Post("/report", r)
		if code == 503 && i == 0 { // a connection cut by the restart, found by this request
			code, reason, _ = tp.Post("/report", r)
		}
		if code != 200 {
			t.Fatalf("after the restart: %d %q", code, reason)
		}
		sent++
		c.Add(30 * time.Second)
	}
	if v := tp.Node("x1"); v.Readings != int64(sent) {
		t.Fatalf("%d readings counted, %d sent and acknowledged", v.Readings, sent)
	}
	t.Logf("answers: %v", statuses)
}

// TestReadMigrations: the embedded migrations are numbered from 001
// without a gap; a gap, a duplicate or a bad name is refused.
func TestReadMigrations(t *testing.T) {
	ms, err := readMigrations(migrationFiles)
	if err != nil || len(ms) < 6 || !strings.Contains(ms[0], "CREATE TABLE nodes") {
		t.Fatalf("embedded migrations: %d, %v", len(ms), err)
	}
	for _, names := range [][]string{
		{"001_a.sql", "003_b.sql"},
		{"001_a.sql", "001_b.sql"},
		{"1_a.sql"},
		{"001a.sql"},
	} {
		fsys := fstest.MapFS{}
		for _, n := range names {
			fsys["migrations/"+n] = &fstest.MapFile{Data: []byte("SELECT 1;")}
		}
		if _, err := readMigrations(fsys); err == nil {
			t.Errorf("migrations %v: read, want an error", names)
		}
	}
}

// TestPGMigrateFromVersion1: a database a version 1 platform made (its
// schema, one node with a notice) is migrated to the current version at
// start, keeps its data, and serves it on the new paths.
func TestPGMigrateFromVersion1(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	migrations, err := readMigrations(migrationFiles)
	if err != nil {
		t.Fatal(err)
	}
	platformtest.PGExec(t, url, `CREATE TABLE schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());`+
		migrations[0]+`
INSERT INTO schema_version (version) VALUES (1);
INSERT INTO nodes (id, state) VALUES ('old', '{}');
INSERT INTO notices (node, at, body) VALUES ('old', '2026-11-30T12:00:00Z', '{"node":"old","at":"2026-11-30T12:00:00Z","text":"kept"}');`)
	tp := servePG(t, url, &platformtest.Clock{T: platformtest.T0}, nil)
	var v int
	ctx := t.Context()
	conn := platformtest.PGConn(t, url)
	if err := conn.QueryRow(ctx, `SELECT max(version) FROM schema_version`).Scan(&v); err != nil || v != len(migrations) {
		t.Fatalf("schema version %d (%v), want %d", v, err, len(migrations))
	}
	var ns []overload.Notice
	if code := tp.Do("GET", "/notices?limit=10", nil, &ns); code != 200 || len(ns) != 1 || ns[0].Text != "kept" {
		t.Fatalf("/notices after the migration: %d, %+v", code, ns)
	}
}

// TestPGFrozenReplica: a replica that freezes inside a transaction (a
// stopped process: its connection stays open, its row lock held) holds
// up that node's reports on the other replica only until the server ends
// the frozen session (-db's idle_in_transaction_session_timeout), not
// for as long as it stays frozen.
func TestPGFrozenReplica(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	frozen, err := Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t)},
		Options{PlanEvery: 30 * time.Second, IdleInTx: 2 * time.Second}, platformtest.Seed())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(frozen.Close)
	other := servePG(t, url, c, nil)
	locked, thaw, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- frozen.withNode(t.Context(), "x1", false, func(pgx.Tx, *pgNode, time.Time) error {
			close(locked)
			<-thaw
			return nil
		})
	}()
	t.Cleanup(func() { close(thaw); <-done })
	<-locked
	testkit.WaitForWithin(t, time.Minute, "a report of x1 to the other replica answered 200", func() bool {
		return other.Read("x1", 50) == 200
	})
}

// TestPGPlanRoundsShareNodes: two replicas' plan rounds, run at once over
// a fleet whose plans are all due, plan every node exactly once between
// them (FOR UPDATE SKIP LOCKED, and next_plan_at moved on in the same
// transaction), and none again before it is due. The nodes are paused
// (being emptied), so each is due again every -plan-every: a node
// neither paused nor overloaded has nothing to plan and is not due.
func TestPGPlanRoundsShareNodes(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	seed := &store.SeedFile{}
	for i := range 60 {
		seed.Nodes = append(seed.Nodes, routing.Node{ID: fmt.Sprintf("n%02d", i), Role: routing.RoleExit, Country: "DE", Price: 100, Paused: true})
	}
	reps := openPGReplicas(t, url, c, Options{PlanEvery: 30 * time.Second}, seed)
	versions := func() map[string]int64 {
		t.Helper()
		out := map[string]int64{}
		rows, err := reps[0].db.Query(t.Context(), `SELECT id, version FROM nodes`)
		if err != nil {
			t.Fatal(err)
		}
		var id string
		var v int64
		if _, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error { out[id] = v; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for round := range 3 {
		c.Add(31 * time.Second) // every node's plan is due
		before := versions()
		errs := make(chan error, 2*len(reps))
		for _, p := range reps {
			for range 2 { // two rounds a replica, at once
				go func() { errs <- fleet.New(p, nil).PlanRound(t.Context()) }()
			}
		}
		for range 2 * len(reps) {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		after := versions()
		if len(after) != len(seed.Nodes) {
			t.Fatalf("%d nodes, want %d", len(after), len(seed.Nodes))
		}
		for id, v := range after {
			if v != before[id]+1 {
				t.Errorf("round %d: node %s saved %d times by the rounds, want once", round, id, v-before[id])
			}
		}
	}
}

// TestPGPlanRoundGoesOn: a node whose plan fails (here with an error the
// database gives as transient, so it is retried first) does not stop the
// round: every other due node is planned, and the failed node's next
// plan is pushed back, so the next round does not start with it again.
func TestPGPlanRoundGoesOn(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	p := openPG(t, url, c, Options{PlanEvery: 30 * time.Second}, platformtest.Seed())
	platformtest.PGExec(t, url, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'node % refused by the test', NEW.id USING ERRCODE = '40001'; END $$;
		CREATE TRIGGER refuse_x1 BEFORE UPDATE ON nodes FOR EACH ROW WHEN (NEW.id = 'x1' AND NEW.version <> OLD.version) EXECUTE FUNCTION refuse();
		UPDATE nodes SET next_plan_at = '2000-01-01' WHERE id = 'x1'`)
	version := func(id string) (v int64, next time.Time) {
		t.Helper()
		var at *time.Time // NULL: nothing to plan
		if err := p.db.QueryRow(t.Context(), `SELECT version, next_plan_at FROM nodes WHERE id = $1`, id).Scan(&v, &at); err != nil {
			t.Fatal(err)
		}
		if at != nil {
			next = *at
		}
		return v, next
	}
	for round := range 2 {
		c.Add(time.Minute)
		// x2 has nothing to plan once planned (neither overloaded nor
		// paused): made due again, so each round has it to plan after x1.
		platformtest.PGExec(t, url, `UPDATE nodes SET next_plan_at = '2000-01-01' WHERE id = 'x2'`)
		before, _ := version("x2")
		err := fleet.New(p, nil).PlanRound(t.Context())
		if err == nil || !strings.Contains(err.Error(), "1 nodes not planned (x1)") {
			t.Fatalf("round %d: %v, want x1 named as not planned", round, err)
		}
		if after, _ := version("x2"); after != before+1 {
			t.Fatalf("round %d: x2 saved %d times, want once: the round stopped at x1", round, after-before)
		}
		if _, next := version("x1"); !next.Equal(c.Now().Add(30 * time.Second)) {
			t.Fatalf("round %d: x1's next plan at %v, want pushed back to %v", round, next, c.Now().Add(30*time.Second))
		}
	}
}

// TestPGBatchTimeoutRetriesFresh: a batch whose transaction times out on
// one node's lock (held past the batch's deadline) takes each report again
// with a deadline of its own: the other node's report is counted, and so
// is the held node's once its lock is free.
func TestPGBatchTimeoutRetriesFresh(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	p, err := Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t)},
		Options{PlanEvery: 30 * time.Second, BatchTimeout: time.Second}, platformtest.Seed())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	// Another session holds x2's row lock for 1.5 s: past the batch's
	// deadline, within a report's own taken again after it.
	ctx := t.Context()
	release := holdRow(t, url, "x2")
	released := make(chan struct{})
	go func() {
		time.Sleep(1500 * time.Millisecond) // the lock's holder, not an assertion's wait
		release()
		close(released)
	}()
	var batch []*reportJob
	f := fleet.New(p, nil)
	for _, id := range []string{"x1", "x2"} {
		r := overload.Reading{Node: id, At: platformtest.T0, MemoryUsedPercent: 50, CPUs: 4, ConntrackMax: 262144}
		take := func(n *store.Node, now time.Time) error {
			out, err := f.Take(n, r, now)
			n.Event, n.Notice = out.Event, out.Notice
			return err
		}
		batch = append(batch, &reportJob{ctx: ctx, id: id, run: store.ReportFuncs(take, f.PlanNode), done: make(chan struct{})})
	}
	p.runBatch(batch)
	<-released
	for _, j := range batch {
		if j.err != nil {
			t.Errorf("report of %s: %v, want counted", j.id, j.err)
		}
	}
}

// TestPGNoticeIDsGrowWithCommits: a notice's id, the number GET /notices
// pages by, is given once its transaction committed, above every id
// already visible, so a client paging GET /notices by id never skips one
// committed later. Here the first notice's transaction stays open while
// the second's commits: the second is listed alone, and the first, once
// committed, after it, with a higher id, on the page that follows the
// second's id. Neither transaction waited for the other.
func TestPGNoticeIDsGrowWithCommits(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	p := openPG(t, url, c, Options{PlanEvery: 30 * time.Second}, platformtest.Seed())
	ctx := t.Context()
	// sendIn sends a notice of node id in tx and returns.
	sendIn := func(tx pgx.Tx, id string) {
		n, err := p.lockNode(ctx, tx, id, false)
		if err == nil {
			n.Notice = &overload.Notice{Node: id, At: c.Now(), Text: id + " is overloaded"}
			err = p.sendNotices(ctx, tx, []*pgNode{n})
		}
		if err != nil {
			t.Error(err)
		}
	}
	first, err := p.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	sendIn(first, "x1")
	if err := pgx.BeginTxFunc(ctx, p.db, pgx.TxOptions{}, func(tx pgx.Tx) error { sendIn(tx, "x2"); return nil }); err != nil {
		t.Fatal(err)
	}
	ns, seen, err := p.Notices(ctx, 0, 0)
	if err != nil || len(ns) != 1 || ns[0].Node != "x2" {
		t.Fatalf("notices while the first is uncommitted: %+v, %v; want x2's alone", ns, err)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	next, last, err := p.Notices(ctx, seen, 0)
	if err != nil || len(next) != 1 || next[0].Node != "x1" || next[0].ID <= seen || last != next[0].ID {
		t.Fatalf("notices after %d: %+v, last %d, %v; want x1's, with a higher id", seen, next, last, err)
	}
	all, _, err := p.Notices(ctx, 0, 0)
	if err != nil || len(all) != 2 || all[0].Node != "x2" || all[1].Node != "x1" {
		t.Fatalf("notices: %+v, %v; want x2's and then x1's", all, err)
	}
}

// TestPGRouteWritesAreConditional: a write-back of a route changed or
// closed by a transaction the writer did not see (here, a session that
// bypasses the node's lock) is a conflict, run again, never a lost
// update: a charge only of a live route as loaded, a closure only of a
// live route.
func TestPGRouteWritesAreConditional(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	p := openPG(t, url, c, Options{PlanEvery: 30 * time.Second}, platformtest.Seed())
	for _, tc := range []struct {
		name, route, behind string
		change              func(n *pgNode)
	}{
		{"charge of a route rewritten meanwhile", "r-idle3", `UPDATE routes SET body = body::jsonb::text::json WHERE id = 'r-idle3'`,
			func(n *pgNode) { n.Routes["r-idle3"].Earned.Bytes += 1000 }},
		{"charge of a route closed meanwhile", "r-idle5", `UPDATE routes SET closed_at = now() WHERE id = 'r-idle5'`,
			func(n *pgNode) { n.Routes["r-idle5"].Earned.Bytes += 1000 }},
		{"closure of a route closed meanwhile", "r-partner", `UPDATE routes SET closed_at = now() WHERE id = 'r-partner'`,
			func(n *pgNode) {
				rt := n.Routes["r-partner"]
				delete(n.Routes, "r-partner")
				n.Closing = append(n.Closing, store.ClosedRoute{Action: routing.Action{Route: rt.Route, Reason: routing.ReasonDrain}, At: c.Now(), Session: rt.Session})
			}},
		{"closure as unused of a route that carried traffic meanwhile", "r-idle3",
			fmt.Sprintf(`UPDATE routes SET last_traffic = '%s' WHERE id = 'r-idle3'`, platformtest.T0.Add(-time.Minute).Format(time.RFC3339Nano)),
			func(n *pgNode) {
				rt := n.Routes["r-idle3"]
				delete(n.Routes, "r-idle3")
				n.Closing = append(n.Closing, store.ClosedRoute{Action: routing.Action{Route: rt.Route, Reason: routing.ReasonUnused}, At: c.Now(), Session: rt.Session})
			}},
		{"closure as unused of a route made another move's alternative meanwhile", "r-move",
			fmt.Sprintf(`UPDATE routes SET relied_on = '%s', last_traffic = NULL WHERE id = 'r-move'`, platformtest.T0.Add(-time.Minute).Format(time.RFC3339Nano)),
			func(n *pgNode) {
				rt := n.Routes["r-move"]
				delete(n.Routes, "r-move")
				n.Closing = append(n.Closing, store.ClosedRoute{Action: routing.Action{Route: rt.Route, Reason: routing.ReasonUnused}, At: c.Now(), Session: rt.Session})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			tx, err := p.db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			n, err := p.lockNode(ctx, tx, "x1", false)
			if err != nil {
				t.Fatal(err)
			}
			platformtest.PGExec(t, url, tc.behind)
			tc.change(n)
			if err := p.saveNode(ctx, tx, n, p.Now()); !errors.Is(err, errConflict) {
				t.Fatalf("write-back: %v, want a conflict", err)
			}
		})
	}
}

// TestPGQuickReportsStaleCopy: a replica decides a quiet node's report on
// its copy of the node, written only if the row is still at the copy's
// version. When the other replica wrote the node since, the copy is
// stale: the report is taken the usual way. Every reading is counted
// once, whichever replica took it, and a reading sent again to the other
// replica is a duplicate there.
func TestPGQuickReportsStaleCopy(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	reps := openPGReplicas(t, url, c, Options{PlanEvery: 30 * time.Second, Cache: 100}, platformtest.Seed())
	const order = "aaabbabbbaab"
	for i, who := range order {
		p, other := reps[who-'a'], reps[1-(who-'a')]
		r := overload.Reading{Version: 2, Node: "x1", Run: platformtest.RunID, Seq: uint64(i + 1), At: c.Now(),
			MemoryUsedPercent: 40, CPUs: 4, ConntrackMax: 262144}
		if _, err := fleet.New(p, nil).Report(t.Context(), r); err != nil {
			t.Fatalf("reading %d to %c: %v", i+1, who, err)
		}
		if _, err := fleet.New(other, nil).Report(t.Context(), r); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("reading %d again to the other replica: %v, want a duplicate", i+1, err)
		}
		c.Add(30 * time.Second)
	}
	var readings, version int64
	if err := reps[0].db.QueryRow(t.Context(), `SELECT readings, version FROM nodes WHERE id = 'x1'`).Scan(&readings, &version); err != nil {
		t.Fatal(err)
	}
	if readings != int64(len(order)) {
		t.Fatalf("%d readings counted, want %d", readings, len(order))
	}
	// A replica's second reading in a row is decided on its copy.
	if a, b := reps[0].cache.taken.Load(), reps[1].cache.taken.Load(); a == 0 || b == 0 {
		t.Fatalf("reports taken on a copy: %d and %d, want some on each replica", a, b)
	}
}

// TestPGNoticePagesMissNone: notices inserted by many transactions at
// once, on two replicas, each committing after a delay of its own, while
// a client pages GET /notices from the last id it saw, on either
// replica: the client sees every notice, each once, in growing ids.
func TestPGNoticePagesMissNone(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	seed := &store.SeedFile{}
	const nodes = 40
	for i := range nodes {
		seed.Nodes = append(seed.Nodes, routing.Node{ID: fmt.Sprintf("n%02d", i), Role: routing.RoleExit, Country: "DE", Price: 100})
	}
	reps := openPGReplicas(t, url, c, Options{PlanEvery: 30 * time.Second}, seed)
	ctx := t.Context()
	var wg sync.WaitGroup
	for i := range nodes {
		p := reps[i%2]
		id := fmt.Sprintf("n%02d", i)
		wg.Go(func() {
			err := pgx.BeginTxFunc(ctx, p.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
				n, err := p.lockNode(ctx, tx, id, false)
				if err != nil {
					return err
				}
				n.Notice = &overload.Notice{Node: id, At: c.Now(), Text: id + " is overloaded"}
				if err := p.sendNotices(ctx, tx, []*pgNode{n}); err != nil {
					return err
				}
				time.Sleep(time.Duration(i%7) * 15 * time.Millisecond) // commits in another order than inserts
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	seen := map[string]int64{}
	after := int64(0)
	page := func(p *Store) {
		ns, last, err := p.Notices(ctx, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.ID <= after {
				t.Fatalf("notice %d of %s listed after %d", n.ID, n.Node, after)
			}
			if id, ok := seen[n.Node]; ok {
				t.Fatalf("%s's notice listed twice: ids %d and %d", n.Node, id, n.ID)
			}
			seen[n.Node], after = n.ID, n.ID
		}
		if last != after {
			t.Fatalf("last %d, want %d", last, after)
		}
	}
	for i := 0; ; i++ {
		select {
		case <-done:
			for range 3 {
				for _, p := range reps {
					for before := -1; before != len(seen); {
						before = len(seen)
						page(p)
					}
				}
			}
			if len(seen) != nodes {
				t.Fatalf("%d notices seen paging, want %d: a notice committed later was numbered below one seen", len(seen), nodes)
			}
			return
		default:
			page(reps[i%2])
		}
	}
}

// openPGReplicas opens two replicas with opt on the database at url, both
// on clock c and seeded with seed, closed when the test ends.
func openPGReplicas(t *testing.T, url string, c *platformtest.Clock, opt Options, seed *store.SeedFile) []*Store {
	t.Helper()
	return []*Store{openPG(t, url, c, opt, seed), openPG(t, url, c, opt, seed)}
}

// openPG opens a store with opt on the database at url, on clock c and
// seeded with seed, closed when the test ends.
func openPG(t *testing.T, url string, c *platformtest.Clock, opt Options, seed *store.SeedFile) *Store {
	t.Helper()
	p, err := Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t)}, opt, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// holdRow has another session lock node id's row until the test ends or
// the returned release is called, as a replica's report of it would.
func holdRow(t *testing.T, url, id string) (release func()) {
	t.Helper()
	ctx := t.Context()
	holder := platformtest.PGConn(t, url)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM nodes WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			tx.Rollback(context.Background())
			holder.Close(context.Background())
		})
	}
	t.Cleanup(release)
	return release
}

// awaitLockWait waits until a session of the database at url waits on
// a lock.
func awaitLockWait(t *testing.T, url string) {
	t.Helper()
	conn := platformtest.PGConn(t, url)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var waiting int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no session waits on a lock after 10 s")
		}
	}
}

// quietReading is a reading of node id that overloads nothing.
func quietReading(id string) overload.Reading {
	return overload.Reading{Node: id, At: platformtest.T0, MemoryUsedPercent: 50, CPUs: 4, ConntrackMax: 262144}
}

// batchHeldOnLock opens a replica with opt (Batch over 1), has another
// session lock x2's row, sends a report of each of ids (x2's among them) and
// waits until their batch waits on the lock. It returns the replica,
// the lock's release and the reports' errors as they are answered.
func batchHeldOnLock(t *testing.T, opt Options, ids ...string) (*Store, func(), chan error) {
	t.Helper()
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	opt.PlanEvery, opt.BatchTimeout = 30*time.Second, 20*time.Second
	p := openPG(t, url, c, opt, platformtest.Seed())
	release := holdRow(t, url, "x2")
	held := make(chan error, len(ids))
	for _, id := range ids {
		go func() {
			_, err := fleet.New(p, nil).Report(t.Context(), quietReading(id))
			held <- err
		}()
	}
	awaitLockWait(t, url)
	return p, release, held
}

// reportBeside reports a quiet reading of node id to p, which must be
// answered within 5 s: beside a batch held on a lock.
func reportBeside(t *testing.T, p *Store, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := fleet.New(p, nil).Report(ctx, quietReading(id)); err != nil {
		t.Fatalf("report of %s while a batch waits on x2's lock: %v, want counted beside it", id, err)
	}
}

// TestPGBatchesOneAtATime: while a batch runs, and for less than the
// spill time, the reports arriving wait for it, to go together in the
// next batch: a batch held on a row lock holds them up until it commits.
func TestPGBatchesOneAtATime(t *testing.T) {
	p, release, held := batchHeldOnLock(t, Options{Batch: 64, Workers: 4, Spill: time.Hour}, "x2")
	others := make(chan error, 2)
	for _, id := range []string{"x1", "f1"} {
		go func() {
			_, err := fleet.New(p, nil).Report(t.Context(), quietReading(id))
			others <- err
		}()
	}
	select {
	case err := <-others:
		t.Fatalf("a report was answered (err %v) while the batch before it ran: want it held for the next batch", err)
	case <-time.After(time.Second):
	}
	release()
	for _, ch := range []chan error{held, others, others} {
		if err := <-ch; err != nil {
			t.Errorf("report once the lock was free: %v", err)
		}
	}
}

// TestPGBatchSpills: a batch held up (here on a row lock another session
// holds) past the spill time holds up the reports arriving after it no
// longer: they go in a batch beside it and are answered while it waits.
func TestPGBatchSpills(t *testing.T) {
	p, release, held := batchHeldOnLock(t, Options{Batch: 64, Spill: 50 * time.Millisecond}, "x2")
	reportBeside(t, p, "x1")
	select {
	case err := <-held:
		t.Fatalf("x2's report answered (err %v) while its row was locked", err)
	default:
	}
	release()
	if err := <-held; err != nil {
		t.Errorf("report of x2 once its lock was free: %v", err)
	}
}

// TestPGFullBatchPassesTurn: a full batch lets the next start beside it
// at once, however long it runs, so a replica takes more reports a
// second than one batch at a time could.
func TestPGFullBatchPassesTurn(t *testing.T) {
	// Linger: x2's and x1's reports go in one batch, full at two.
	p, release, held := batchHeldOnLock(t, Options{Batch: 2, Linger: 2 * time.Second, Spill: time.Hour}, "x2", "x1")
	reportBeside(t, p, "f1")
	release()
	for range 2 {
		if err := <-held; err != nil {
			t.Errorf("report of the full batch once the lock was free: %v", err)
		}
	}
}

// TestPGSlowReportsStartFromCopy: a report that starts or ends an
// overload, or sends a notice, or whose node a plan can act on
// (overloaded, or priced since its last plan), goes the usual way, which
// starts from the replica's copy of the node, with the reading taken on
// it, when its row is still at the copy's version, instead of decoding
// the row's state and taking the reading again. What it writes is what
// decoding would have: two replicas with copies, taking turns (so a copy
// is sometimes stale), write the same rows, routes, events and notices as
// one replica without copies, fed the same readings, for a registered
// node with routes (x1) and one that only reports (n9).
func TestPGSlowReportsStartFromCopy(t *testing.T) {
	cl := pgtest.Need(t, cluster)
	withCopies, without := cl.NewDatabase(t), cl.NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	// The three reports of a step in one batch.
	opt := Options{PlanEvery: 30 * time.Second, Batch: 3, Linger: 5 * time.Second}
	optCopies := opt
	optCopies.Cache = 100
	reps := openPGReplicas(t, withCopies, c, optCopies, platformtest.Seed())
	ref, err := Open(t.Context(), without, store.Config{Now: c.Now, Logger: platformtest.Logger(t)}, opt, platformtest.Seed())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ref.Close)
	send := func(p *Store, i int) {
		t.Helper()
		var wg sync.WaitGroup
		for _, r := range []overload.Reading{
			{Version: 2, Node: "x1", Run: platformtest.RunID, Seq: uint64(i + 1), At: c.Now(), MemoryUsedPercent: platformtest.MemoryPattern(i), CPUs: 4, ConntrackMax: 262144},
			{Version: 2, Node: "x2", Run: platformtest.RunID, Seq: uint64(i + 1), At: c.Now(), MemoryUsedPercent: 40, CPUs: 4, ConntrackMax: 262144},
			{Version: 2, Node: "n9", Run: platformtest.RunID, Seq: uint64(i + 1), At: c.Now(), MemoryUsedPercent: platformtest.MemoryPattern(i + 3), CPUs: 4, ConntrackMax: 262144},
		} {
			wg.Go(func() {
				if _, err := fleet.New(p, nil).Report(t.Context(), r); err != nil {
					t.Errorf("reading %d of %s: %v", i+1, r.Node, err)
				}
			})
		}
		wg.Wait()
	}
	dump := func(p *Store) string { return dumpDB(t, p) }
	const order = "aaabaaaaaabbaaaaaaabaaaa"
	for i, who := range order {
		send(reps[who-'a'], i)
		send(ref, i)
		if got, want := dump(reps[0]), dump(ref); got != want {
			t.Fatalf("after reading %d (to replica %c), with copies:\n%s\nwithout:\n%s", i+1, who, got, want)
		}
		c.Add(30 * time.Second)
	}
	if n := reps[0].cache.reused.Load() + reps[1].cache.reused.Load(); n == 0 {
		t.Fatal("no report taken the usual way started from a copy")
	} else {
		t.Logf("%d reports taken the usual way started from a copy", n)
	}
}

// TestPGNoticeInsertPlanKeepsIndex: a session of the platform's plans a
// statement once (plan_cache_mode force_generic_plan, its default); the
// notice insert's plan made while notices was empty, as autovacuum left
// it analyzed, reads the whole table once it holds 20,000 notices. Run
// between planEachRun and planOnce, as the platform runs it, it reads the
// node's own entries by index, and the session's setting is back after.
func TestPGNoticeInsertPlanKeepsIndex(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	ctx := t.Context()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, _, err := migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO nodes (id, state) SELECT 'n' || i, '{}' FROM generate_series(1, 20000) i`)
	exec(`VACUUM ANALYZE notices`)
	if _, err := conn.Prepare(ctx, "notice", noticeInsert); err != nil {
		t.Fatal(err)
	}
	explain := func() string {
		t.Helper()
		// A notice of n5, whose last was two hours ago; no outbox rows.
		args := []string{`'{n5}'`, `'{"2026-12-02 12:00:00+00"}'`, `'{"{}"}'`, `'{"2026-12-02 11:00:00+00"}'`}
		for range len((&outboxRows{}).args()) {
			args = append(args, `'{}'`)
		}
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE notice("+strings.Join(args, ", ")+")", pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		var line string
		if err := eachRow(rows, nil, []any{&line}, func() error {
			fmt.Fprintln(&b, line)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	explain() // planned on the empty table
	exec(`INSERT INTO notices (node, at, body, num) SELECT 'n' || i, now() - interval '2 hours', '{}', i FROM generate_series(1, 20000) i`)
	if plan := explain(); strings.Contains(plan, "Seq Scan on notices") {
		t.Logf("planned once, on the empty table, the insert reads every notice:\n%s", plan)
	}
	exec(`BEGIN`)
	exec(planEachRun)
	if plan := explain(); strings.Contains(plan, "Seq Scan on notices") {
		t.Errorf("after planEachRun the notice insert reads every notice of 20,000:\n%s", plan)
	}
	exec(planOnce)
	var mode string
	if err := conn.QueryRow(ctx, `SHOW plan_cache_mode`).Scan(&mode); err != nil || mode != "force_generic_plan" {
		t.Errorf("after planOnce plan_cache_mode is %q (%v), want the session's force_generic_plan", mode, err)
	}
	exec(`COMMIT`)
}

// dumpDB is what p's database holds, as text, but for the time of
// writing.
func dumpDB(t *testing.T, p *Store) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT id, role, country, state::text, readings, overloaded, coalesce(next_plan_at::text, ''), version FROM nodes ORDER BY id`,
		`SELECT id, node, user_id, key, country, price, coalesce(last_traffic::text, ''), coalesce(closed_at::text, ''), coalesce(closed_by::text, ''), body::text FROM routes ORDER BY id`,
		`SELECT node, kind, at::text, body::text FROM events ORDER BY id`,
		`SELECT node, at::text, body::text FROM notices ORDER BY id`,
	} {
		rows, err := p.db.Query(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestPGSeedWritesAsOneByOne: a seed's nodes new to the database, written
// a chunk at a time (seedNew), leave the database as seeding them one by
// one does (lockNode, SeedNode, saveNode): rows, states, versions and
// routes; and a node a report created before the seed, which seedNew
// leaves to that way, is seeded too. Two replicas seed at once.
func TestPGSeedWritesAsOneByOne(t *testing.T) {
	cl := pgtest.Need(t, cluster)
	seed := platformtest.Seed()
	for i := range 1200 { // more than two chunks
		id := fmt.Sprintf("n%04d", i)
		seed.Nodes = append(seed.Nodes, routing.Node{ID: id, Role: routing.RoleExit, Country: "NL", Price: pricing.Price(100 + i%7), Paused: i%5 == 0, MaxUsers: i % 3})
		if i%2 == 0 {
			seed.Routes = append(seed.Routes, routing.Route{ID: id + "-r", User: fmt.Sprintf("u%d", i), Key: "vpn", Node: id,
				Start: platformtest.T0.Add(-time.Hour), LastTraffic: platformtest.T0.Add(-time.Minute)})
		}
	}
	c := &platformtest.Clock{T: platformtest.T0}
	dbs := map[bool]*Store{}
	for _, oneByOne := range []bool{true, false} {
		url := cl.NewDatabase(t)
		// A node that reported before the route table listed it.
		p, err := Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t)}, Options{PlanEvery: 30 * time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.New(p, nil).Report(t.Context(), overload.Reading{Version: 2, Node: "n0700", Run: platformtest.RunID, Seq: 1, At: c.Now(), MemoryUsedPercent: 40, CPUs: 4, ConntrackMax: 262144}); err != nil {
			t.Fatal(err)
		}
		p.Close()
		seedOneByOne = oneByOne
		reps := openPGReplicasAtOnce(t, url, c, Options{PlanEvery: 30 * time.Second}, seed)
		seedOneByOne = false
		dbs[oneByOne] = reps[0]
	}
	got, want := dumpDB(t, dbs[false]), dumpDB(t, dbs[true])
	if got != want {
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("seeded a chunk at a time, line %d:\n%s\none by one:\n%s\n(%d and %d lines)", i+1, gl[i], wl[i], len(gl), len(wl))
			}
		}
		t.Fatalf("seeded a chunk at a time, %d lines; one by one, %d", len(gl), len(wl))
	}
	if n := strings.Count(got, "\n"); n < 1200+600 {
		t.Errorf("the dump has %d lines, want the seed's nodes and routes", n)
	}
}

// openPGReplicasAtOnce opens two replicas on url at the same time, each
// seeding with seed.
func openPGReplicasAtOnce(t *testing.T, url string, c *platformtest.Clock, opt Options, seed *store.SeedFile) []*Store {
	t.Helper()
	reps := make([]*Store, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range reps {
		wg.Go(func() {
			reps[i], errs[i] = Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t)}, opt, seed)
		})
	}
	wg.Wait()
	for i, p := range reps {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(p.Close)
	}
	return reps
}

// BenchmarkPGSeed seeds 20,000 nodes, half of them with a route, into a
// new database: the first start of a platform on a fleet's route table,
// a chunk of nodes at a time (seedNew) and one by one.
func BenchmarkPGSeed(b *testing.B) {
	cl := pgtest.Need(b, cluster)
	seed := &store.SeedFile{}
	for i := range 20000 {
		id := fmt.Sprintf("n%06d", i)
		seed.Nodes = append(seed.Nodes, routing.Node{ID: id, Role: routing.RoleExit, Country: "NL", Price: 100})
		if i%2 == 0 {
			seed.Routes = append(seed.Routes, routing.Route{ID: id + "-r", User: fmt.Sprintf("u%d", i), Key: "vpn", Node: id,
				Start: platformtest.T0.Add(-time.Hour), LastTraffic: platformtest.T0.Add(-time.Minute)})
		}
	}
	c := &platformtest.Clock{T: platformtest.T0}
	for _, oneByOne := range []bool{false, true} {
		b.Run(map[bool]string{false: "chunks", true: "one-by-one"}[oneByOne], func(b *testing.B) {
			seedOneByOne = oneByOne
			defer func() { seedOneByOne = false }()
			for b.Loop() {
				b.StopTimer()
				url := cl.NewDatabase(b)
				b.StartTimer()
				p, err := Open(b.Context(), url, store.Config{Now: c.Now, Logger: slog.New(slog.DiscardHandler)}, Options{}, seed)
				if err != nil {
					b.Fatal(err)
				}
				p.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(len(seed.Nodes)), "µs/node")
		})
	}
}

// cluster is the throwaway PostgreSQL cluster of this package's tests; nil
// without PostgreSQL (the tests needing it skip).
var cluster *pgtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(pgtest.Main(m, &cluster))
}

// servePG starts a platform on the database at url, served by an
// httptest server; called twice on one url, two replicas. (Package
// api's tests have their own: a test-helper package cannot import this
// one while its tests import the helpers.)
func servePG(t *testing.T, url string, c *platformtest.Clock, seed *store.SeedFile) *apitest.Platform {
	t.Helper()
	p, err := Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t)}, Options{PlanEvery: 30 * time.Second, Batch: 8, Cache: 1000}, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return apitest.Serve(t, c, p)
}
