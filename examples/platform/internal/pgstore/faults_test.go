package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// dropSessions ends every session of the database at url, but the
// caller's, or with url another database of the cluster, of every database as a restart or failover would: the replicas' pools open new
// ones, with the database's settings as they are now.
func dropSessions(t *testing.T, url string) {
	t.Helper()
	platformtest.PGExec(t, url, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname <> 'postgres' AND pid <> pg_backend_pid() AND backend_type = 'client backend'
			AND (datname = current_database() OR current_database() = 'postgres')`)
}

// TestPGReadOnlyDatabase: a database that takes no writes (one set
// read-only for maintenance, or a standby reached before its promotion)
// answers every write 503 unavailable with Retry-After, saying so, not
// 500 "node state not saved", which blames one node; the agents retry,
// and once it takes writes again the same readings are counted.
func TestPGReadOnlyDatabase(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	tp := servePG(t, url, c, platformtest.Seed())
	if code := tp.Read("x1", 50); code != 200 {
		t.Fatalf("first reading: %d", code)
	}
	platformtest.PGExec(t, url, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`)
	dropSessions(t, url)
	c.Add(30 * time.Second)
	r, err := json.Marshal(overload.Reading{Node: "x1", At: c.Now(), MemoryUsedPercent: 50, CPUs: 4, ConntrackMax: 262144})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []struct {
		path, token, body string
	}{
		{"/report", "x1-token", string(r)},
		{"/price", platformtest.TestToken, `{"node":"x1","price":7}`},
	} {
		// The first request may find a session the drop ended.
		testkit.WaitForWithin(t, 10*time.Second, "POST "+req.path+" answered by a read-only session", func() bool {
			code, _, b := tp.Raw("POST", req.path, req.token, req.body)
			return code != 503 || !strings.Contains(string(b), "terminat")
		})
		code, h, b := tp.Raw("POST", req.path, req.token, req.body)
		if code != 503 || !strings.Contains(string(b), `"reason":"`+api.ReasonUnavailable+`"`) || h.Get("Retry-After") == "" ||
			!strings.Contains(string(b), "read-only") {
			t.Fatalf("POST %s to a read-only database: %d %s (Retry-After %q), want 503 %q saying the database is read-only",
				req.path, code, b, h.Get("Retry-After"), api.ReasonUnavailable)
		}
	}
	platformtest.PGExec(t, url, `SET TRANSACTION READ WRITE; DO $$ BEGIN EXECUTE format('ALTER DATABASE %I RESET default_transaction_read_only', current_database()); END $$`)
	dropSessions(t, url)
	testkit.WaitForWithin(t, 10*time.Second, "the reading counted once the database takes writes", func() bool {
		code, _, _ := tp.Raw("POST", "/report", "x1-token", string(r))
		return code == 200
	})
	if v := tp.Node("x1"); v.Readings != 2 {
		t.Fatalf("%d readings counted, want 2", v.Readings)
	}
}

// TestPGReadiness: GET /readyz answers 503 while the replica cannot
// serve (its database refuses connections; a newer platform migrated the
// schema beside it), saying what and where to the admin and nothing of
// the database to a caller without a token, and 200 again by itself
// once the fault ends; GET /healthz, the process alive, stays 200.
func TestPGReadiness(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	tp := servePG(t, url, &platformtest.Clock{T: platformtest.T0}, platformtest.Seed())
	migrations, err := readMigrations(migrationFiles)
	if err != nil {
		t.Fatal(err)
	}
	ready := func(t *testing.T, want int, wantAdmin string) {
		t.Helper()
		testkit.WaitForWithin(t, 10*time.Second, fmt.Sprintf("GET /readyz answered %d", want), func() bool {
			code, _, _ := tp.Raw("GET", "/readyz", "", "")
			return code == want
		})
		code, h, b := tp.Raw("GET", "/readyz", platformtest.TestToken, "")
		if code != want || !strings.Contains(string(b), wantAdmin) {
			t.Fatalf("GET /readyz with the admin's token: %d %s, want %d saying %q", code, b, want, wantAdmin)
		}
		if want == 503 && h.Get("Retry-After") == "" {
			t.Errorf("GET /readyz: 503 without Retry-After")
		}
		if code, _, b := tp.Raw("GET", "/readyz", "", ""); want == 503 && strings.Contains(string(b), "postgres") {
			t.Errorf("GET /readyz without a token: %d %s, shows the database", code, b)
		}
		if code, _, _ := tp.Raw("GET", "/healthz", "", ""); code != 200 {
			t.Errorf("GET /healthz: %d, want 200 (the process is alive)", code)
		}
	}
	ready(t, 200, `"ready": true`)

	t.Run("newer schema", func(t *testing.T) {
		newer := len(migrations) + 1
		platformtest.PGExec(t, url, fmt.Sprintf(`INSERT INTO schema_version (version) VALUES (%d)`, newer))
		ready(t, 503, fmt.Sprintf("schema version %d", newer))
		ready(t, 503, RedactDSN(url))
		_, err := Open(t.Context(), url, store.Config{Logger: platformtest.Logger(t)}, Options{}, nil)
		if err == nil || !strings.Contains(err.Error(), RedactDSN(url)) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d is newer", newer)) {
			t.Errorf("a start on a newer schema: %v, want an error naming the database and the version", err)
		}
		platformtest.PGExec(t, url, fmt.Sprintf(`DELETE FROM schema_version WHERE version = %d`, newer))
		ready(t, 200, `"ready": true`)
	})
	t.Run("no connections", func(t *testing.T) {
		// From another database of the cluster: this one takes none.
		allow := refuseConnections(t, url)
		ready(t, 503, "not currently accepting connections")
		allow()
		ready(t, 200, `"ready": true`)
	})
}

// refuseConnections has the database at url refuse new sessions (from
// another database of the cluster: this one takes none) and ends those it
// has. allow, or the test's end, lets them in again.
func refuseConnections(t *testing.T, url string) (allow func()) {
	t.Helper()
	name, other := pgDatabase(t, url), cluster.URL("postgres")
	platformtest.PGExec(t, other, fmt.Sprintf(`ALTER DATABASE %q ALLOW_CONNECTIONS false`, name))
	t.Cleanup(func() { // t's context is done by now
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, other); err == nil {
			conn.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %q ALLOW_CONNECTIONS true`, name))
			conn.Close(ctx)
		}
	})
	dropSessions(t, other)
	return func() {
		platformtest.PGExec(t, other, fmt.Sprintf(`ALTER DATABASE %q ALLOW_CONNECTIONS true`, name))
	}
}

// pgDatabase is the database the URL names.
func pgDatabase(t *testing.T, url string) string {
	t.Helper()
	c, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return c.Database
}

// TestPGConnectionsRefused: a database that refuses this replica's new
// sessions (connections disallowed, a password rotated, the role's
// connection limit reached) fails every request 503 unavailable, the
// server's words kept: no node's state is at fault, so no 500 "node state
// not saved", and the agents retry. Once it takes them again, the
// platform goes on by itself.
func TestPGConnectionsRefused(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	tp := servePG(t, url, &platformtest.Clock{T: platformtest.T0}, platformtest.Seed())
	allow := refuseConnections(t, url)
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/price", `{"node":"x1","price":7}`},
		{"GET", "/nodes/x1", ""},
	} {
		testkit.WaitForWithin(t, 10*time.Second, req.method+" "+req.path+" refused a session", func() bool {
			_, _, b := tp.Raw(req.method, req.path, platformtest.TestToken, req.body)
			return strings.Contains(string(b), "not currently accepting connections")
		})
		code, h, b := tp.Raw(req.method, req.path, platformtest.TestToken, req.body)
		if code != 503 || !strings.Contains(string(b), `"reason":"`+api.ReasonUnavailable+`"`) || h.Get("Retry-After") == "" {
			t.Errorf("%s %s while the database refuses sessions: %d %s, want 503 %q with Retry-After", req.method, req.path, code, b, api.ReasonUnavailable)
		}
	}
	allow()
	if code, _, b := tp.Raw("POST", "/price", platformtest.TestToken, `{"node":"x1","price":7}`); code != 204 {
		t.Fatalf("POST /price once the database takes sessions again: %d %s", code, b)
	}
}

// TestPGTamperedSchema: a table not as the migrations left it (a column
// renamed by hand, a table dropped) stops a start with an error naming
// the database and what is missing, makes a running replica not ready,
// saying the same, and fails its requests 503 naming the column, not 500
// "node state not saved", which blames a node; put back, it serves again
// by itself.
func TestPGTamperedSchema(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	tp := servePG(t, url, c, platformtest.Seed())
	platformtest.PGExec(t, url, `ALTER TABLE nodes RENAME COLUMN readings TO readings_old`)
	code, _, b := tp.Raw("GET", "/readyz", platformtest.TestToken, "")
	if code != 503 || !strings.Contains(string(b), "nodes.readings") || !strings.Contains(string(b), RedactDSN(url)) {
		t.Errorf("GET /readyz with nodes.readings renamed: %d %s, want 503 naming the database and nodes.readings", code, b)
	}
	c.Add(30 * time.Second)
	r, err := json.Marshal(overload.Reading{Node: "x1", At: c.Now(), MemoryUsedPercent: 50, CPUs: 4, ConntrackMax: 262144})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, b := tp.Raw("POST", "/report", "x1-token", string(r)); code != 503 || !strings.Contains(string(b), `"reason":"`+api.ReasonUnavailable+`"`) || !strings.Contains(string(b), "readings") {
		t.Errorf("POST /report with nodes.readings renamed: %d %s, want 503 %q naming the column", code, b, api.ReasonUnavailable)
	}
	_, err = Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t)}, Options{}, nil)
	if err == nil || !strings.Contains(err.Error(), "nodes.readings") || !strings.Contains(err.Error(), RedactDSN(url)) {
		t.Errorf("a start on the database with nodes.readings renamed: %v, want an error naming the database and nodes.readings", err)
	}
	platformtest.PGExec(t, url, `ALTER TABLE nodes RENAME COLUMN readings_old TO readings`)
	if code, _, b := tp.Raw("GET", "/readyz", "", ""); code != 200 {
		t.Errorf("GET /readyz with the column back: %d %s", code, b)
	}
	if code, _, b := tp.Raw("POST", "/report", "x1-token", string(r)); code != 200 {
		t.Errorf("POST /report with the column back: %d %s", code, b)
	}
}

// TestSchemaColumns: the columns Ready and Open check are the ones the
// migrations leave, every table's.
func TestSchemaColumns(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	openPG(t, url, &platformtest.Clock{T: platformtest.T0}, Options{}, nil)
	rows, err := platformtest.PGConn(t, url).Query(t.Context(), `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for rows.Next() {
		var table, column string
		if err := rows.Scan(&table, &column); err != nil {
			t.Fatal(err)
		}
		got[table] = append(got[table], column)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(schemaColumns, got); diff != "" {
		t.Errorf("schemaColumns against a migrated database (-want +got):\n%s", diff)
	}
}

// TestPGReadCommittedWhateverTheDefault: a database whose default
// isolation is another (ALTER DATABASE … SET default_transaction_isolation
// = 'serializable', as some sites set for every application) still runs
// the platform's writes, and its outbox's single statements, at READ
// COMMITTED, which its locks are written for: at SERIALIZABLE the
// claims and settles of deliveries failed to serialize, and notices
// waited out leases and went twice.
func TestPGReadCommittedWhateverTheDefault(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	platformtest.PGExec(t, url, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = serializable', current_database()); END $$;
		CREATE TABLE isolation_seen (tbl text, level text);
		CREATE FUNCTION see_isolation() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO isolation_seen VALUES (TG_TABLE_NAME, current_setting('transaction_isolation')); RETURN NULL; END $$`)
	c := &platformtest.Clock{T: platformtest.T0}
	tp := servePG(t, url, c, platformtest.Seed())
	platformtest.PGExec(t, url, `CREATE TRIGGER see_nodes AFTER UPDATE ON nodes FOR EACH STATEMENT EXECUTE FUNCTION see_isolation();
		CREATE TRIGGER see_routes AFTER INSERT OR UPDATE ON routes FOR EACH STATEMENT EXECUTE FUNCTION see_isolation()`)
	for range 3 {
		if code := tp.Read("x1", 50); code != 200 {
			t.Fatalf("report: %d", code)
		}
		c.Add(30 * time.Second)
	}
	if code, _, b := tp.Raw("POST", "/price", platformtest.TestToken, `{"node":"x1","price":7}`); code != 204 {
		t.Fatalf("price: %d %s", code, b)
	}
	if code, _, b := tp.Raw("POST", "/routes", platformtest.TestToken, `{"node":"x1","user":"u9","key":"k"}`); code != 201 {
		t.Fatalf("open: %d %s", code, b)
	}
	rows, err := platformtest.PGConn(t, url).Query(t.Context(), `SELECT tbl, level, count(*) FROM isolation_seen GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var tbl, level string
		var n int
		if err := rows.Scan(&tbl, &level, &n); err != nil {
			t.Fatal(err)
		}
		seen += n
		if level != "read committed" {
			t.Errorf("%d writes of %s at %s, want read committed", n, tbl, level)
		}
	}
	if rows.Err() != nil || seen == 0 {
		t.Fatalf("no write seen (%v)", rows.Err())
	}
}

// TestPGSynchronousCommitOn: a database or role set to
// synchronous_commit = off (for speed, by a site's defaults) would
// acknowledge readings a crash of the server then loses (3 of 2,666 in
// one pg_ctl stop -m immediate under two replicas' load): the platform's
// sessions commit with it on, unless the -db URL itself says otherwise.
func TestPGSynchronousCommitOn(t *testing.T) {
	for _, tc := range []struct {
		name, query, want string
	}{
		{"database off", "", "on"},
		{"the URL's own choice", "synchronous_commit=off", "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := pgtest.Need(t, cluster).NewDatabase(t)
			platformtest.PGExec(t, url, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = off', current_database()); END $$;
				CREATE TABLE commit_seen (level text);
				CREATE FUNCTION see_commit() RETURNS trigger LANGUAGE plpgsql AS $$
					BEGIN INSERT INTO commit_seen VALUES (current_setting('synchronous_commit')); RETURN NULL; END $$`)
			c := &platformtest.Clock{T: platformtest.T0}
			u := url
			if tc.query != "" {
				u += "&" + tc.query
			}
			tp := servePG(t, u, c, platformtest.Seed())
			platformtest.PGExec(t, url, `CREATE TRIGGER see_nodes AFTER UPDATE ON nodes FOR EACH STATEMENT EXECUTE FUNCTION see_commit()`)
			for range 3 {
				if code := tp.Read("x1", 50); code != 200 {
					t.Fatalf("report: %d", code)
				}
				c.Add(30 * time.Second)
			}
			var levels []string
			rows, err := platformtest.PGConn(t, url).Query(t.Context(), `SELECT DISTINCT level FROM commit_seen`)
			if err == nil {
				levels, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil || len(levels) != 1 || levels[0] != tc.want {
				t.Fatalf("reports committed with synchronous_commit %v (%v), want %s", levels, err, tc.want)
			}
		})
	}
}

// TestPGLockTimeoutDefault: a database or role with a lock_timeout (a
// site's safety default) neither fails replicas started at once (the
// migration's advisory lock, the seed's rows) nor answers 503 for a
// report that waits a moment on its node's lock: the platform bounds its
// waits itself (the request's deadline, statement_timeout), unless the
// -db URL sets lock_timeout.
func TestPGLockTimeoutDefault(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	platformtest.PGExec(t, url, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET lock_timeout = ''20ms''', current_database()); END $$`)
	c := &platformtest.Clock{T: platformtest.T0}
	seed := &store.SeedFile{}
	for i := range 3000 {
		seed.Nodes = append(seed.Nodes, routing.Node{ID: fmt.Sprintf("s%d", i), Role: routing.RoleExit, Country: "DE", Price: 100})
	}
	seed.Nodes = append(seed.Nodes, platformtest.Seed().Nodes...)
	for range 3 { // the advisory lock's wait is a race: three starts at once
		openPGReplicasAtOnce(t, url, c, Options{}, seed)
	}
	tp := servePG(t, url, c, nil)
	release := holdRow(t, url, "x1")
	done := make(chan int, 1)
	go func() { done <- tp.Read("x1", 50) }()
	awaitLockWait(t, url)
	time.Sleep(100 * time.Millisecond)
	release()
	if code := <-done; code != 200 {
		t.Fatalf("a report that waited 100 ms on its node's lock: %d, want 200", code)
	}
}
