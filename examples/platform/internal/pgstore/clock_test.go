package pgstore

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// TestPGClocksApart: two replicas whose clocks are two minutes apart (or
// one replica whose clock stepped back two minutes) serve one node's
// changes as one clock would: a price change after another's is taken,
// not refused as out of order; traffic on a route opened by the replica
// ahead is charged, not refused as before its session; a route opened
// after a rise locks the risen price; pauses and approvals are dated in
// their order.
func TestPGClocksApart(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	ahead := &platformtest.Clock{T: platformtest.T0.Add(2 * time.Minute)}
	behind := &platformtest.Clock{T: platformtest.T0}
	a, b := servePG(t, url, ahead, platformtest.Seed()), servePG(t, url, behind, platformtest.Seed())
	for _, st := range []struct {
		on         string
		path, body string
		want       int
	}{
		{"ahead", "/price", `{"node":"x2","price":120}`, 204},
		{"behind", "/price", `{"node":"x2","price":130}`, 204},
		{"behind", "/routes", `{"node":"x2","user":"u9","key":"k"}`, 201},
		{"ahead", "/routes", `{"node":"x2","user":"u8","key":"k"}`, 201},
		{"behind", "/traffic", `{"route":"x2-2","bytes":1000000000}`, 200},
		{"ahead", "/nodes/x1/pause", ``, 204},
		{"behind", "/nodes/x1/approve", ``, 204},
		{"ahead", "/nodes/x1/pause", ``, 204},
	} {
		tp := a
		if st.on == "behind" {
			tp = b
		}
		if code, _, body := tp.Raw("POST", st.path, platformtest.TestToken, st.body); code != st.want {
			t.Errorf("POST %s %s on the replica %s: %d %s, want %d", st.path, st.body, st.on, code, body, st.want)
		}
	}
	v := a.Node("x2")
	if v.Price != 130 {
		t.Errorf("x2's price %d, want 130, the later change", v.Price)
	}
	for _, rt := range v.Routes {
		switch rt.Route.ID {
		case "x2-1":
			if rt.Session.Locked != 130 {
				t.Errorf("route x2-1, opened after the change to 130, locked %d", rt.Session.Locked)
			}
		case "x2-2":
			if rt.Earned.Bytes != 1e9 || rt.Earned.Total != 130 {
				t.Errorf("route x2-2 earned %+v, want 1 GB at 130", rt.Earned)
			}
		}
	}
	_, _, body := a.Raw("GET", "/nodes/x1/events", platformtest.TestToken, "")
	var evs struct{ Events []store.NumberedEvent }
	if err := json.Unmarshal(body, &evs); err != nil || len(evs.Events) != 3 {
		t.Fatalf("x1's events: %s (%v), want 3", body, err)
	}
	for i := 1; i < len(evs.Events); i++ {
		if evs.Events[i].At.Before(evs.Events[i-1].At) {
			t.Errorf("x1's event %d (%s at %s) dated before event %d (%s at %s)", evs.Events[i].ID, evs.Events[i].Kind, evs.Events[i].At,
				evs.Events[i-1].ID, evs.Events[i-1].Kind, evs.Events[i-1].At)
		}
	}
}

// TestPGClocksApartOverload: an overload started through a replica whose
// clock is two minutes ahead and ended through one two minutes behind it
// ends no earlier than it started, so its cool-down runs its full length
// from the start's clock on.
func TestPGClocksApartOverload(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	ahead := &platformtest.Clock{T: platformtest.T0.Add(2 * time.Minute)}
	behind := &platformtest.Clock{T: platformtest.T0}
	a, b := servePG(t, url, ahead, platformtest.Seed()), servePG(t, url, behind, platformtest.Seed())
	for seq := 1; seq <= 9; seq++ {
		tp, mem := a, 95.0
		if seq > 3 {
			tp, mem = b, 50.0
		}
		r := overload.Reading{Version: 2, Node: "x1", Run: platformtest.RunID, Seq: uint64(seq), At: platformtest.T0.Add(time.Duration(seq) * time.Second),
			MemoryUsedPercent: mem, CPUs: 4, ConntrackMax: 262144}
		if code, _, _ := tp.Post("/report", r); code != 200 {
			t.Fatalf("reading %d: %d", seq, code)
		}
		if seq == 3 {
			if v := a.Node("x1"); !v.Overloaded || !v.Since.Equal(ahead.Now()) {
				t.Fatalf("after 3 readings at 95 %%: overloaded %v since %v, want since %v", v.Overloaded, v.Since, ahead.Now())
			}
		}
	}
	v := a.Node("x1")
	if v.Overloaded || v.OverloadEnded.Before(ahead.Now()) {
		t.Fatalf("after the overload ended through the replica behind: overloaded %v, ended %v, before it started at %v", v.Overloaded, v.OverloadEnded, ahead.Now())
	}
}

// TestPGPlanTimeWithinLead: a plan time no further ahead than a plan
// period and the clocks' slack (store.ClockSlack) is the node's
// schedule, not a clock step: a round at the same time, or on a replica
// a second behind, does not plan the node again; one whose clock is
// behind by more than that does.
func TestPGPlanTimeWithinLead(t *testing.T) {
	url := pgtest.Need(t, cluster).NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	seed := &store.SeedFile{Nodes: []routing.Node{{ID: "x1", Role: routing.RoleExit, Country: "DE", Price: 100, Paused: true}}}
	p := openPG(t, url, c, Options{PlanEvery: 30 * time.Second}, seed)
	version := func() int64 {
		t.Helper()
		var v int64
		if err := p.db.QueryRow(t.Context(), `SELECT version FROM nodes WHERE id = 'x1'`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	round := func() int64 {
		t.Helper()
		before := version()
		if err := fleet.New(p, nil).PlanRound(t.Context()); err != nil {
			t.Fatal(err)
		}
		return version() - before
	}
	c.Add(31 * time.Second)
	if n := round(); n != 1 {
		t.Fatalf("x1, paused and due, saved %d times by a round, want once", n)
	}
	for _, back := range []time.Duration{0, time.Second, store.ClockSlack} {
		c.Add(-back)
		if n := round(); n != 0 {
			t.Errorf("a round %v behind the one that planned x1 saved it %d times, want none: its plan time is its schedule", back, n)
		}
		c.Add(back)
	}
	c.Add(-(30*time.Second + store.ClockSlack + time.Second))
	if n := round(); n != 1 {
		t.Errorf("a round %v behind the one that planned x1 saved it %d times, want once: its plan time was set by a clock since stepped back",
			30*time.Second+store.ClockSlack+time.Second, n)
	}
}
