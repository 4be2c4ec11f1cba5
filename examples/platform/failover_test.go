package main

import (
	"encoding/json"
	"fmt"
	"os"
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
	"github.com/proofkit/nodekit/routing"
)

// TestFailoverSyncStandby: a primary with a synchronous standby, two
// replicas of the built platform on a multi-host -db with
// target_session_attrs=read-write, six agents reporting and six routes
// charged through both. The primary is SIGKILLed under that load and
// the standby promoted: the replicas go on on the new primary, and
// every reading and charge they acknowledged is there.
func TestFailoverSyncStandby(t *testing.T) {
	pgtest.Need(t, cluster)
	primary, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Stop()
	standby, err := primary.StartStandby("standby1")
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Stop()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = 'standby1'`, `SELECT pg_reload_conf()`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "the standby streaming synchronously", func() bool {
		var state string
		err := admin.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'`).Scan(&state)
		return err == nil && state == "sync"
	})
	admin.Close(ctx)
	one, err := primary.CreateDatabase()
	if err != nil {
		t.Fatal(err)
	}
	name := one[strings.LastIndex(one, "/")+1 : strings.Index(one, "?")]
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.Port, standby.Port, name)

	const agents = 6
	seed := store.SeedFile{}
	for i := range agents {
		id := fmt.Sprintf("fo-%d", i)
		seed.Nodes = append(seed.Nodes, routing.Node{ID: id, Role: routing.RoleExit, Country: "DE", Price: 100})
		seed.Routes = append(seed.Routes, routing.Route{ID: "r-" + id, User: fmt.Sprintf("u%d", i), Key: "vpn", Node: id,
			Kind: routing.KindOwn, Start: time.Now().Add(-time.Hour)})
	}
	b, _ := json.Marshal(seed)
	routes := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(routes, b, 0o600); err != nil {
		t.Fatal(err)
	}
	reps := []*replica{startReplica(t, "-db", dsn, "-routes", routes), startReplica(t, "-db", dsn)}

	// Each agent reports (version 2, a seq a reading) and charges its
	// route, through the replicas in turn, until stopped; it keeps what
	// was acknowledged.
	type acked struct {
		readings int64  // readings acknowledged
		sent     int64  // the highest seq sent
		bytes    uint64 // traffic acknowledged
		okAfter  int    // acknowledgements after the promotion
	}
	var (
		mu       sync.Mutex
		ack      = make([]acked, agents)
		promoted bool
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range agents {
		wg.Go(func() {
			id := fmt.Sprintf("fo-%d", i)
			for seq := int64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				r := reps[int(seq)%len(reps)]
				rd := overload.Reading{Version: 2, Run: "run-" + id, Seq: uint64(seq), Node: id, At: time.Now().UTC(),
					MemoryUsedPercent: 40, CPUs: 4, ConntrackMax: 262144}
				mu.Lock()
				ack[i].sent = seq
				mu.Unlock()
				code, _ := r.do("POST", "/report", rd)
				tcode, _ := r.do("POST", "/traffic", fleet.TrafficRequest{Route: "r-" + id, Bytes: 1000})
				mu.Lock()
				if code == 200 {
					ack[i].readings++
				}
				if tcode == 200 {
					ack[i].bytes += 1000
				}
				if promoted && code == 200 {
					ack[i].okAfter++
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	testkit.WaitFor(t, "readings acknowledged before the failover", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range ack {
			if a.readings < 20 {
				return false
			}
		}
		return true
	})
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the replicas fail meanwhile: 503, retried by agents
	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	promoted = true
	mu.Unlock()
	testkit.WaitForWithin(t, time.Minute, "readings acknowledged again after the promotion", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range ack {
			if a.okAfter < 10 {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()

	// Every acknowledged reading is counted on the new primary, and every
	// acknowledged charge earned: counted at least what was acknowledged,
	// at most what was sent (an answer lost in the failover may still
	// have been committed).
	conn := platformtest.PGConn(t, standby.URL(name))
	var inRecovery bool
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery); err != nil || inRecovery {
		t.Fatalf("the standby is not a primary: in recovery %v, %v", inRecovery, err)
	}
	for i, a := range ack {
		id := fmt.Sprintf("fo-%d", i)
		v := reps[0].View(id)
		if v.Readings < a.readings || v.Readings > a.sent {
			t.Errorf("%s: %d readings counted on the new primary; %d acknowledged, %d sent", id, v.Readings, a.readings, a.sent)
		}
		var earned uint64
		for _, rt := range v.Routes {
			earned += rt.Earned.Bytes
		}
		if earned < a.bytes {
			t.Errorf("%s: %d bytes charged on the new primary, %d acknowledged", id, earned, a.bytes)
		}
		t.Logf("%s: %d readings acknowledged of %d sent, %d counted; %d bytes acknowledged, %d charged", id, a.readings, a.sent, v.Readings, a.bytes, earned)
	}
}
