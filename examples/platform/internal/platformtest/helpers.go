package platformtest

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// RunID is the run of every reading the suite sends.
const RunID = "0123456789abcdef0123456789abcdef"

// Reading is node's seq-th reading of run RunID, taken now, with memory
// at mem percent.
func Reading(node string, seq int, mem float64) overload.Reading {
	return overload.Reading{Version: 2, Node: node, Run: RunID, Seq: uint64(seq), At: time.Now().Round(0),
		MemoryUsedPercent: mem, CPUs: 4, ConntrackMax: 262144}
}

// PGConn is a connection to the database at url, made within 30 s and
// closed when t ends.
func PGConn(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Close(ctx)
	})
	return conn
}

// PGExec runs sql on the database at url, within 30 s.
func PGExec(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := PGConn(t, url).Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

// MemoryPattern is the memory of reading i in the tests below: over 90 %
// in 3 of every 7 readings, so the node goes in and out of overload.
func MemoryPattern(i int) float64 {
	if i%7 < 3 {
		return 95
	}
	return 40
}

// Clock is the platform's clock in these tests.
type Clock struct {
	mu sync.Mutex
	T  time.Time
}

// Now is the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.T }

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) { c.mu.Lock(); c.T = c.T.Add(d); c.mu.Unlock() }

// Seed is a fleet where the expected closures are known: on exit x1,
// own routes idle for 3 h (r-idle3) and 5 h (r-idle5), a partner route idle
// for 6 h (r-partner), a route in use whose user holds the same route
// through x2 in DE for less (r-move), one whose alternative is in another
// country (r-fr), and one that is its user's only route (r-only).
func Seed() *store.SeedFile {
	start := T0.Add(-8 * time.Hour)
	route := func(id, user, key, node string, kind routing.Kind, idle time.Duration) routing.Route {
		return routing.Route{ID: id, User: user, Key: key, Node: node, Kind: kind, Start: start, LastTraffic: T0.Add(-idle)}
	}
	return &store.SeedFile{
		Nodes: []routing.Node{
			{ID: "x1", Role: routing.RoleExit, Country: "DE", Price: 100},
			{ID: "x2", Role: routing.RoleExit, Country: "DE", Price: 80},
			{ID: "f1", Role: routing.RoleExit, Country: "FR", Price: 50},
		},
		Routes: []routing.Route{
			route("r-idle3", "u1", "vpn", "x1", routing.KindOwn, 3*time.Hour),
			route("r-idle5", "u2", "vpn", "x1", routing.KindOwn, 5*time.Hour),
			route("r-partner", "u3", "vpn", "x1", routing.KindPartner, 6*time.Hour),
			route("r-move", "u4", "vpn", "x1", routing.KindOwn, time.Minute),
			route("r-move-alt", "u4", "vpn", "x2", routing.KindOwn, time.Minute),
			route("r-fr", "u5", "vpn", "x1", routing.KindOwn, time.Minute),
			route("r-fr-alt", "u5", "vpn", "f1", routing.KindOwn, time.Minute),
			route("r-only", "u6", "vpn", "x1", routing.KindOwn, time.Minute),
		},
	}
}

// Logger logs to t's output, so a failing test shows the platform's log.
func Logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

// NextLink is the path of the next page a page's Link header names, or
// "" without one.
func NextLink(t testing.TB, path string, header http.Header) string {
	t.Helper()
	l := header.Get("Link")
	if l == "" {
		return ""
	}
	next, ok := strings.CutPrefix(l, "<")
	if ok {
		next, ok = strings.CutSuffix(next, `>; rel="next"`)
	}
	if !ok || !strings.HasPrefix(next, "/") {
		t.Fatalf("GET %s: Link %q", path, l)
	}
	return next
}
