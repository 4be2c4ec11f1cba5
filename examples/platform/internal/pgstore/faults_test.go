package pgstore

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// dropSessions ends every session of the database at url but the
// caller's, as a restart or failover would: the replicas' pools open new
// ones, with the database's settings as they are now.
func dropSessions(t *testing.T, url string) {
	t.Helper()
	platformtest.PGExec(t, url, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
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
