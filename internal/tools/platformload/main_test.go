package main

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/internal/testing/pgtest"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &cluster)) }

// TestKillReplicaMidLoad: two replicas on one database take a fleet's
// readings; one is killed with SIGKILL in the middle. The agents go on
// through the other; at the end every reading acknowledged is counted
// once (none lost, none twice), and no node got two notices (one an
// hour, decided in the database, not in the dead replica's memory).
func TestKillReplicaMidLoad(t *testing.T) {
	cl := pgtest.Need(t, cluster)
	if testing.Short() {
		t.Skip("a 20-second load run")
	}
	dir := t.TempDir()
	bin, err := buildPlatform(dir, platformPkg)
	if err != nil {
		t.Fatal(err)
	}
	url, err := cl.CreateDatabase()
	if err != nil {
		t.Fatal(err)
	}
	const nodes = 200
	tokens, routes, err := writeFleet(dir, nodes, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-token-file", tokens, "-routes", routes, "-db", url, "-plan-every", "1s"}
	var reps []*replica
	for range 2 {
		r, err := startReplica(t.Context(), bin, args...)
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, r)
		t.Cleanup(r.kill)
	}
	go func() {
		time.Sleep(8 * time.Second)
		reps[0].kill()
	}()
	res, err := runLoad(t.Context(), loadConfig{urls: []string{reps[0].URL, reps[1].URL}, nodes: nodes,
		interval: time.Second, measure: 16 * time.Second, overloadEvery: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent %d, acknowledged %d (%d duplicates: retries of readings the killed replica had counted), retries %d, refused %v, p99 %v",
		res.Sent, res.Acked, res.Duplicates, res.Retries, res.Refused, res.P99)
	if res.Acked != res.Sent || len(res.Refused) > 0 {
		t.Fatalf("sent %d, acknowledged %d, refused %v: want every reading acknowledged", res.Sent, res.Acked, res.Refused)
	}
	if res.Retries == 0 {
		t.Fatal("no retry: the kill did not land mid-load")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	counted := map[string]int64{}
	rows, _ := conn.Query(ctx, `SELECT id, readings FROM nodes`)
	var id string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { counted[id] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		if got, want := counted[nodeName(i)], res.perNode[i].Load(); got != want {
			t.Errorf("node %s: %d readings counted, %d acknowledged", nodeName(i), got, want)
		}
	}
	notices := map[string]int{}
	rows, _ = conn.Query(ctx, `SELECT node, count(*) FROM notices GROUP BY node`)
	var c int
	if _, err := pgx.ForEachRow(rows, []any{&id, &c}, func() error { notices[id] = c; return nil }); err != nil {
		t.Fatal(err)
	}
	for node, c := range notices {
		if c > 1 {
			t.Errorf("node %s: %d notices within the hour", node, c)
		}
	}
	if len(notices) != nodes/2 {
		t.Errorf("%d nodes got a notice, want the %d that went into overload", len(notices), nodes/2)
	}
	if err := reps[1].stop(); err != nil {
		t.Errorf("the surviving replica: %v", err)
	}
}

// TestFloorTakesTheLoad: the floor answers the load's readings as the
// platform does (every one acknowledged, none refused), and refuses a
// report without a node's token.
func TestFloorTakesTheLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the floor and runs a 3-second load")
	}
	dir := t.TempDir()
	bin, err := buildPlatform(dir, floorPkg)
	if err != nil {
		t.Fatal(err)
	}
	const nodes = 300
	tokens, routes, err := writeFleet(dir, nodes, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, err := startReplica(t.Context(), bin, "-token-file", tokens, "-routes", routes, "-debug-listen", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.kill)
	if r.debugURL == "" {
		t.Error("the floor did not log its profiles' address")
	}
	res, err := runLoad(t.Context(), loadConfig{urls: []string{r.URL}, nodes: nodes,
		interval: time.Second, warm: time.Second, measure: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent == 0 || res.Acked != res.Sent || len(res.Refused) > 0 {
		t.Errorf("%d readings sent, %d acknowledged, refused %v", res.Sent, res.Acked, res.Refused)
	}
	resp, err := http.Post(r.URL+"/report", "application/json", strings.NewReader(`{"v":2}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a report without a token: %s, want 401", resp.Status)
	}
	if err := r.stop(); err != nil {
		t.Error(err)
	}
}
