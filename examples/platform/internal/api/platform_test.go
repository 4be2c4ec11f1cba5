package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/filestore"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// opener starts a platform on a subtest's store; called again, it starts
// another on the same store (a restart, or a second replica).
type opener func(c *platformtest.Clock, seed *store.SeedFile) *apitest.Platform

// eachStore runs test on the file store and on PostgreSQL (skipped
// without it): the same API, the same verdicts.
func eachStore(t *testing.T, test func(t *testing.T, open opener)) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		test(t, func(c *platformtest.Clock, seed *store.SeedFile) *apitest.Platform {
			return apitest.NewPlatform(t, dir, c, seed)
		})
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Need(t, cluster).NewDatabase(t)
		test(t, func(c *platformtest.Clock, seed *store.SeedFile) *apitest.Platform {
			return newPGTestPlatform(t, url, c, seed)
		})
	})
}

func closedIDs(v fleet.NodeView) []string {
	var ids []string
	for _, c := range v.Closed {
		ids = append(ids, c.Action.Route.ID+":"+string(c.Action.Reason))
	}
	return ids
}

// TestOverloadLifecycle runs the help page's story with its figures on a
// fake clock: 3 of 5 readings over 90 % memory → overloaded, refused, one
// notice, the longest-idle own route closed at once, the route in use with
// a cheaper DE alternative moved after 15 minutes, nothing else; then the
// overload ends and the node is admitted after the 10-minute cool-down.
func TestOverloadLifecycle(t *testing.T) { eachStore(t, testOverloadLifecycle) }

func testOverloadLifecycle(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, platformtest.Seed())

	if a := tp.Admit("x1"); !a.Admit {
		t.Fatalf("fresh node not admitted: %+v", a)
	}
	for i := range 3 {
		if code := tp.Read("x1", 95); code != 200 {
			t.Fatalf("reading %d: status %d", i, code)
		}
		if a := tp.Admit("x1"); a.Admit != (i < 2) {
			t.Fatalf("after %d readings over 90 %%: admit %+v", i+1, a)
		}
		c.Add(30 * time.Second)
	}
	if a := tp.Admit("x1"); a.Reason != "overloaded" {
		t.Fatalf("admit: %+v, want reason overloaded", a)
	}
	v := tp.Node("x1")
	if got, want := closedIDs(v), []string{"r-idle5:unused"}; !slices.Equal(got, want) {
		t.Fatalf("closed at the start: %v, want %v", got, want)
	}
	// 15 minutes of readings every 30 s: the route in use goes at 15 min.
	for range 30 {
		if code := tp.Read("x1", 95); code != 200 {
			t.Fatalf("status %d", code)
		}
		c.Add(30 * time.Second)
	}
	v = tp.Node("x1")
	if got, want := closedIDs(v), []string{"r-idle5:unused", "r-move:move"}; !slices.Equal(got, want) {
		t.Fatalf("closed after 15 min: %v, want %v", got, want)
	}
	if v.LastPlan == nil || v.LastPlan.Actions[0].Keeps.ID != "r-move-alt" {
		t.Fatalf("last plan: %+v, want the move keeping r-move-alt", v.LastPlan)
	}
	var notices []overload.Notice
	tp.Do("GET", "/notices", nil, &notices)
	if len(notices) != 1 || notices[0].Node != "x1" || !strings.Contains(notices[0].Text, "memory at 95 %") {
		t.Fatalf("notices: %+v, want one for x1 naming memory at 95 %%", notices)
	}

	// The overload ends after 3 readings under the limit (2 of 5 left).
	for range 3 {
		tp.Read("x1", 40)
		c.Add(30 * time.Second)
	}
	a := tp.Admit("x1")
	if ended := tp.Node("x1").OverloadEnded; a.Admit || a.Reason != "cool-down" || !a.Until.Equal(ended.Add(routing.DefaultCoolDown)) {
		t.Fatalf("after the end at %v: %+v, want cool-down until 10 min later", ended, a)
	}
	c.Add(10 * time.Minute)
	if a := tp.Admit("x1"); !a.Admit {
		t.Fatalf("after the cool-down: %+v, want admitted", a)
	}
	v = tp.Node("x1")
	if len(v.Events) != 2 || v.Events[0].Kind != overload.Start || v.Events[1].Kind != overload.End {
		t.Fatalf("events: %+v, want start and end", v.Events)
	}
	var routes []string
	for _, r := range v.Routes {
		routes = append(routes, r.Route.ID)
	}
	if want := []string{"r-fr", "r-idle3", "r-only", "r-partner"}; !slices.Equal(routes, want) {
		t.Fatalf("routes left: %v, want %v", routes, want)
	}

	// A restart loses nothing.
	tp2 := open(c, platformtest.Seed())
	v2 := tp2.Node("x1")
	if !slices.Equal(closedIDs(v2), closedIDs(v)) || len(v2.Events) != 2 || v2.Notices != 1 || !tp2.Admit("x1").Admit {
		t.Fatalf("after restart: %+v", v2)
	}
	// and a new overload within the hour produces no second notice.
	for range 3 {
		tp2.Read("x1", 95)
		c.Add(30 * time.Second)
	}
	tp2.Do("GET", "/notices", nil, &notices)
	if !tp2.Node("x1").Overloaded || len(notices) != 1 {
		t.Fatalf("second overload within the hour: overloaded %v, %d notices, want true and 1",
			tp2.Node("x1").Overloaded, len(notices))
	}
}

// TestReportAnswers checks the status codes the agent's retry rules rely on.
func TestReportAnswers(t *testing.T) { eachStore(t, testReportAnswers) }

func testReportAnswers(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, platformtest.Seed())
	r := overload.Reading{Node: "x1", At: platformtest.T0, MemoryUsedPercent: 95, CPUs: 4, ConntrackMax: 1}
	post := func(token string, body []byte) int {
		code, _, _ := tp.Raw("POST", "/report", token, string(body))
		return code
	}
	good, _ := json.Marshal(r)
	older := r
	older.At = platformtest.T0.Add(-time.Second)
	old, _ := json.Marshal(older)
	bad := bytes.Replace(good, []byte(`"memory_used_percent":95`), []byte(`"memory_used_percent":120`), 1)
	other := r
	other.Node = "../etc"
	evil, _ := json.Marshal(other)
	ahead := r
	ahead.At = platformtest.T0.Add(time.Hour)
	future, _ := json.Marshal(ahead)
	for _, tc := range []struct {
		name  string
		token string
		body  []byte
		want  int
	}{
		{"wrong token", "nope", good, 401},
		{"first", platformtest.TestToken, good, 200},
		{"same again: a retry", platformtest.TestToken, good, 200},
		{"older", platformtest.TestToken, old, 409},
		{"memory above 100 %", platformtest.TestToken, bad, 400},
		{"not JSON", platformtest.TestToken, []byte("{"), 400},
		{"no version", platformtest.TestToken, []byte(`{"node":"x1","at":"2026-11-30T13:00:00Z"}`), 400},
		{"node name not a file name", platformtest.TestToken, evil, 400},
		{"an hour ahead of the clock", platformtest.TestToken, future, 400},
	} {
		if got := post(tc.token, tc.body); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := len(tp.Node("x1").Events); got != 0 {
		t.Fatalf("events %d after one reading", got)
	}
	if v := tp.Node("x1"); !v.LastReading.Equal(platformtest.T0) || v.Readings != 1 {
		t.Fatalf("tracker's latest reading %v, %d counted; want %v, 1", v.LastReading, v.Readings, platformtest.T0)
	}
	// An unknown node is tracked but not admitted (routing refuses a node
	// with no role) and not planned.
	if code := tp.Read("new-node", 50); code != 200 {
		t.Fatalf("unknown node: %d", code)
	}
	if v := tp.Node("new-node"); v.Registered || v.Admitted || !strings.Contains(v.Why, "Role") {
		t.Fatalf("unknown node: %+v", v)
	}
	if code := tp.Do("GET", "/admit?node=nobody", nil, nil); code != 404 {
		t.Fatalf("admit of a node never seen: %d, want 404", code)
	}
	if code := tp.Do("GET", "/admit", nil, nil); code != 400 {
		t.Fatalf("admit of no node: %d, want 400", code)
	}

	// A node's token: its readings need not name the node, may not name
	// another, and it may do nothing but report.
	anon := r
	anon.Node, anon.At = "", platformtest.T0.Add(time.Second)
	b, _ := json.Marshal(anon)
	if got := post("x1-token", b); got != 200 {
		t.Fatalf("x1's token, reading without a node: %d, want 200", got)
	}
	if last := tp.Node("x1").LastReading; !last.Equal(anon.At) {
		t.Fatalf("x1's latest reading %v, want %v", last, anon.At)
	}
	anon.Node, anon.At = "x2", platformtest.T0.Add(2*time.Second)
	b, _ = json.Marshal(anon)
	if got := post("x1-token", b); got != 403 {
		t.Fatalf("x1's token, reading of x2: %d, want 403", got)
	}
	if code, _, _ := tp.Raw("POST", "/price", "x1-token", `{"node":"x1","price":1}`); code != 403 {
		t.Fatalf("x1's token setting a price: %d, want 403", code)
	}
}

// TestPricing: a route opened on an admitted node locks the price; a rise
// does not reach it, a drop does once it has stood 3 hours; traffic is
// charged at the session's price then; a refused node opens nothing.
func TestPricing(t *testing.T) { eachStore(t, testPricing) }

func testPricing(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, platformtest.Seed())
	var rt store.Route
	if code := tp.Do("POST", "/routes", fleet.OpenRequest{Node: "x2", User: "u9", Key: "vpn"}, &rt); code != 201 {
		t.Fatalf("open: %d", code)
	}
	if rt.Session.Locked != 80 || rt.Route.Country != "DE" {
		t.Fatalf("opened %+v, want locked at 80 in DE", rt)
	}
	c.Add(time.Minute)
	tp.Do("POST", "/price", fleet.PriceRequest{Node: "x2", Price: 120}, nil) // a rise
	c.Add(time.Minute)
	tp.Do("POST", "/price", fleet.PriceRequest{Node: "x2", Price: 40}, nil) // a drop
	charge := func() store.Route {
		var got store.Route
		if code := tp.Do("POST", "/traffic", fleet.TrafficRequest{Route: rt.Route.ID, Bytes: 2e9}, &got); code != 200 {
			t.Fatalf("traffic: %d", code)
		}
		return got
	}
	if got := charge(); got.Earned.Total != 160 || got.Route.Price != 80 {
		t.Fatalf("2 GB at once: earned %d at price %d, want 160 at 80", got.Earned.Total, got.Route.Price)
	}
	c.Add(3 * time.Hour)
	if got := charge(); got.Earned.Total != 160+80 || got.Route.Price != 40 {
		t.Fatalf("2 GB 3 h after the drop: earned %d at price %d, want 240 at 40", got.Earned.Total, got.Route.Price)
	}
	// Overload x2: it opens nothing more.
	for range 3 {
		tp.Read("x2", 95)
		c.Add(30 * time.Second)
	}
	code := tp.Do("POST", "/routes", fleet.OpenRequest{Node: "x2", User: "u10", Key: "vpn"}, nil)
	if code != http.StatusConflict {
		t.Fatalf("open on an overloaded node: %d, want 409", code)
	}
	if code := tp.Do("POST", "/traffic", fleet.TrafficRequest{Route: "nope", Bytes: 1}, nil); code != 404 {
		t.Fatalf("traffic of an unknown route: %d", code)
	}
}

// TestSeedOperators: a route table's node may name its operator; a bad
// name or an unknown field is refused, naming the node.
func TestSeedOperators(t *testing.T) {
	var s store.SeedFile
	err := json.Unmarshal([]byte(`{"nodes":[{"id":"a1","role":"exit","country":"DE","price":1,"operator":"alice"},{"id":"b1","role":"exit","country":"DE","price":1}],"routes":[]}`), &s)
	if err != nil || len(s.Nodes) != 2 || s.Nodes[0].ID != "a1" || s.Operators["a1"] != "alice" || len(s.Operators) != 1 {
		t.Fatalf("seed: %+v, %v", s, err)
	}
	for in, want := range map[string]string{
		`{"nodes":[{"id":"a1","role":"exit","operator":"a/b"}]}`: `node a1: operator "a/b": want`,
		`{"nodes":[{"id":"a1","role":"exit","owner":"x"}]}`:      "unknown field",
	} {
		if err := json.Unmarshal([]byte(in), &s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	if err := api.CheckOwners(api.Tokens{"t": "a1 operator:bob"}, map[string]string{"a1": "alice"}); err == nil {
		t.Error("a token file naming another operator than the route table: no error")
	}
}

// TestMemoryUnknownIsNotStale checks that a reading without memory clears
// the node's memory figure rather than keeping the last one, so a stale
// 95 % cannot make routes in use move.
func TestMemoryUnknownIsNotStale(t *testing.T) { eachStore(t, testMemoryUnknownIsNotStale) }

func testMemoryUnknownIsNotStale(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, platformtest.Seed())
	if code := tp.Read("x1", 95); code != 200 {
		t.Fatalf("reading: status %d", code)
	}
	if got := tp.Node("x1").MemoryPercent; got != 95 {
		t.Fatalf("memory after a 95 %% reading = %v", got)
	}
	c.Add(30 * time.Second)
	r := overload.Reading{Node: "x1", At: c.Now(), CPUs: 4, ConntrackMax: 262144,
		Missing: []overload.Input{overload.InputMemory}}
	if code := tp.Do("POST", "/report", r, nil); code != 200 {
		t.Fatalf("reading without memory: status %d", code)
	}
	if got := tp.Node("x1").MemoryPercent; got != 0 {
		t.Fatalf("memory after a reading without it = %v, want 0 (unknown)", got)
	}
}

// TestOpenedRouteIDsAreUnique checks that a route opened through the API
// never takes the ID of a seeded route (traffic finds routes by ID alone).
func TestOpenedRouteIDsAreUnique(t *testing.T) { eachStore(t, testOpenedRouteIDsAreUnique) }

func testOpenedRouteIDsAreUnique(t *testing.T, open opener) {
	seed := platformtest.Seed()
	seed.Routes = append(seed.Routes, routing.Route{ID: "x2-1", User: "u7", Key: "vpn", Node: "x2",
		Kind: routing.KindOwn, Start: platformtest.T0.Add(-time.Hour), LastTraffic: platformtest.T0})
	tp := open(&platformtest.Clock{T: platformtest.T0}, seed)
	var rt store.Route
	if code := tp.Do("POST", "/routes", fleet.OpenRequest{Node: "x2", User: "u9", Key: "vpn"}, &rt); code != 201 {
		t.Fatalf("open: status %d", code)
	}
	if rt.Route.ID == "x2-1" {
		t.Fatalf("opened route took the seeded route's ID %q", rt.Route.ID)
	}
	ids := map[string]bool{}
	for _, r := range tp.Node("x2").Routes {
		if ids[r.Route.ID] {
			t.Fatalf("two routes on x2 share ID %q", r.Route.ID)
		}
		ids[r.Route.ID] = true
	}
	if !ids["x2-1"] || !ids[rt.Route.ID] {
		t.Fatalf("x2 routes %v: want the seeded x2-1 and the opened %s", ids, rt.Route.ID)
	}
}

// TestRefusalReasons: every refusal is {"error", "reason"} with the report
// protocol's words, and a retry of a counted reading is 200 duplicate.
func TestRefusalReasons(t *testing.T) { eachStore(t, testRefusalReasons) }

func testRefusalReasons(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, platformtest.Seed())
	send := func(token string, body []byte) (int, map[string]any) {
		code, _, b := tp.Raw("POST", "/report", token, string(body))
		var ans map[string]any
		if err := json.Unmarshal(b, &ans); err != nil {
			t.Fatalf("answer %d is not JSON: %v", code, err)
		}
		return code, ans
	}
	r := overload.Reading{Version: 2, Node: "x1", Run: "0123456789abcdef0123456789abcdef", Seq: 1, At: platformtest.T0,
		MemoryUsedPercent: 50, CPUs: 4, ConntrackMax: 1}
	good, _ := json.Marshal(r)
	v1 := overload.Reading{Node: "x1", At: platformtest.T0.Add(-time.Minute), MemoryUsedPercent: 50, CPUs: 4, ConntrackMax: 1}
	older, _ := json.Marshal(v1)
	big := append([]byte(`{"v":1,"node":"`), bytes.Repeat([]byte("x"), api.MaxBody)...)
	other, _ := json.Marshal(overload.Reading{Node: "x2", At: platformtest.T0, CPUs: 4, ConntrackMax: 1})
	for _, tc := range []struct {
		name   string
		token  string
		body   []byte
		status int
		reason string
		dup    bool
	}{
		{"counted", platformtest.TestToken, good, 200, "", false},
		{"a retry", platformtest.TestToken, good, 200, "", true},
		{"older", platformtest.TestToken, older, 409, api.ReasonOlder, false},
		{"cannot be true", platformtest.TestToken, []byte(`{"v":1,"node":"x1","at":"2026-11-30T12:00:00Z","memory_used_percent":300}`), 400, api.ReasonInvalid, false},
		{"too large", platformtest.TestToken, big, 413, api.ReasonTooLarge, false},
		{"wrong token", "nope", good, 401, api.ReasonUnauthorized, false},
		{"another node's reading", "x1-token", other, 403, api.ReasonUnauthorized, false},
	} {
		code, ans := send(tc.token, tc.body)
		reason, _ := ans["reason"].(string)
		dup, _ := ans["duplicate"].(bool)
		if code != tc.status || reason != tc.reason || dup != tc.dup {
			t.Errorf("%s: %d reason %q duplicate %v, want %d %q %v (%v)", tc.name, code, reason, dup, tc.status, tc.reason, tc.dup, ans)
		}
		if code >= 400 && ans["error"] == "" {
			t.Errorf("%s: no error text: %v", tc.name, ans)
		}
	}
	if v := tp.Node("x1"); v.Readings != 1 {
		t.Fatalf("%d readings counted, want 1", v.Readings)
	}
}

// TestReadsNeedAdminToken: the endpoints that show users' routes, keys
// and prices answer only the admin's token; /healthz answers anyone.
func TestReadsNeedAdminToken(t *testing.T) { eachStore(t, testReadsNeedAdminToken) }

func testReadsNeedAdminToken(t *testing.T, open opener) {
	tp := open(&platformtest.Clock{T: platformtest.T0}, platformtest.Seed())
	get := func(path, token string) int {
		code, _, _ := tp.Raw("GET", path, token, "")
		return code
	}
	for _, path := range []string{"/nodes", "/nodes/x1", "/nodes/x1/events", "/notices", "/plans", "/admit?node=x1"} {
		if code := get(path, ""); code != 401 {
			t.Errorf("GET %s without a token: %d, want 401", path, code)
		}
		if code := get(path, "x1-token"); code != 403 {
			t.Errorf("GET %s with a node's token: %d, want 403", path, code)
		}
		if code := get(path, platformtest.TestToken); code != 200 {
			t.Errorf("GET %s with the admin's token: %d, want 200", path, code)
		}
	}
	if code := get("/healthz", ""); code != 200 {
		t.Errorf("GET /healthz without a token: %d, want 200", code)
	}
}

// TestMovedUserKeepsTheAlternative: x1 moves u4's route in use because u4
// holds the same route through x2; that copy has moved no traffic for
// hours. When x2 is then overloaded too, its plan must not close that copy
// as unused: the user was just moved onto it.
func TestMovedUserKeepsTheAlternative(t *testing.T) { eachStore(t, testMovedUserKeepsTheAlternative) }

func testMovedUserKeepsTheAlternative(t *testing.T, open opener) {
	seed := platformtest.Seed()
	for i := range seed.Routes {
		if seed.Routes[i].ID == "r-move-alt" {
			seed.Routes[i].LastTraffic = platformtest.T0.Add(-5 * time.Hour)
		}
	}
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, seed)
	for range 40 { // 20 minutes over 90 %: r-move goes at 15
		if code := tp.Read("x1", 95); code != 200 {
			t.Fatalf("x1: %d", code)
		}
		c.Add(30 * time.Second)
	}
	if got := closedIDs(tp.Node("x1")); !slices.Contains(got, "r-move:move") {
		t.Fatalf("x1 closed %v, want r-move moved", got)
	}
	for range 10 {
		tp.Do("POST", "/report", overload.Reading{Node: "x2", At: c.Now(), MemoryUsedPercent: 95, CPUs: 4, ConntrackMax: 262144}, nil)
		c.Add(30 * time.Second)
	}
	v := tp.Node("x2")
	if !v.Overloaded {
		t.Fatal("x2 not overloaded")
	}
	for _, r := range v.Routes {
		if r.Route.ID == "r-move-alt" {
			return
		}
	}
	t.Fatalf("x2 closed %v: u4's copy it was moved onto is gone", closedIDs(v))
}

// A version 2 reading dated an hour ahead of the platform's clock (the
// node's clock stepped forward) is counted: v2 readings are ordered by run
// and seq, so the 5-minute bound of version 1 does not apply to them, and
// the honest readings after it are counted too.
func TestVersion2ClockAhead(t *testing.T) { eachStore(t, testVersion2ClockAhead) }

func testVersion2ClockAhead(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, platformtest.Seed())
	run := strings.Repeat("d", 32)
	post := func(seq uint64, at time.Time) int {
		r := overload.Reading{Version: overload.ReadingVersion, Run: run, Seq: seq, Node: "x1", At: at, MemoryUsedPercent: 50, CPUs: 4, ConntrackMax: 1}
		return tp.Do("POST", "/report", r, nil)
	}
	if got := post(1, platformtest.T0.Add(time.Hour)); got != 200 {
		t.Fatalf("v2 reading an hour ahead: status %d, want 200", got)
	}
	if got := post(2, platformtest.T0.Add(30*time.Second)); got != 200 {
		t.Fatalf("the honest reading after it: status %d, want 200", got)
	}
	if got := post(3, platformtest.T0.Add(48*time.Hour)); got != 400 {
		t.Fatalf("v2 reading two days ahead: status %d, want 400", got)
	}
	if v := tp.Node("x1"); v.Readings != 2 {
		t.Fatalf("%d readings counted, want 2", v.Readings)
	}
}

// TestNodesPaging: GET /nodes?limit=N lists N nodes by id and links the
// next page (Link: rel="next"); walking the pages gives the whole list,
// each node as the unpaged list shows it (routes and notice counts
// included). A bad limit is a 400 that names it.
func TestNodesPaging(t *testing.T) { eachStore(t, testNodesPaging) }

func testNodesPaging(t *testing.T, open opener) {
	tp := open(&platformtest.Clock{T: platformtest.T0}, platformtest.Seed())
	for i := range 5 {
		if code := tp.Read(fmt.Sprintf("n%02d", i), 95); code != 200 {
			t.Fatalf("report of n%02d: %d", i, code)
		}
	}
	var all []json.RawMessage
	if code := tp.Do("GET", "/nodes", nil, &all); code != 200 {
		t.Fatalf("/nodes: %d", code)
	}
	if len(all) != 8 {
		t.Fatalf("/nodes lists %d nodes, want 8", len(all))
	}
	paged, pages := walkPages[json.RawMessage](t, tp, "/nodes?limit=3", 3, 5)
	if pages != 3 {
		t.Errorf("%d pages of 3 for 8 nodes, want 3", pages)
	}
	if len(paged) != len(all) {
		t.Fatalf("pages list %d nodes, the whole list %d", len(paged), len(all))
	}
	for i := range all {
		if !bytes.Equal(paged[i], all[i]) {
			t.Errorf("node %d: paged\n%s\nunpaged\n%s", i, paged[i], all[i])
		}
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x"} {
		if code := tp.Do("GET", "/nodes?"+q, nil, nil); code != 400 {
			t.Errorf("/nodes?%s: %d, want 400", q, code)
		}
	}
}

// TestNoticesPaging: GET /notices?limit=N pages the notices by id (the
// order they were sent in); following Link gives them all, each once, in
// the unpaged order, also when several share one instant. A bad cursor
// is a 400.
func TestNoticesPaging(t *testing.T) { eachStore(t, testNoticesPaging) }

func testNoticesPaging(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, platformtest.Seed())
	// Seven nodes overloaded at the same instants, twice, an hour apart:
	// 14 notices, 7 at each instant.
	var nodes []string
	for i := range 7 {
		nodes = append(nodes, fmt.Sprintf("n%02d", i))
	}
	for round := range 2 {
		tp.ReadRounds(nodes, 95, 3)
		tp.ReadRounds(nodes, 10, 5)
		if round == 0 {
			c.Add(time.Hour)
		}
	}
	var all []store.NumberedNotice
	if code := tp.Do("GET", "/notices", nil, &all); code != 200 || len(all) != 14 {
		t.Fatalf("/notices: %d, %d notices, want 14", code, len(all))
	}
	paged, pages := walkPages[store.NumberedNotice](t, tp, "/notices?limit=4", 4, 5)
	if pages != 4 {
		t.Errorf("%d pages of 4 for 14 notices, want 4", pages)
	}
	if len(paged) != len(all) {
		t.Fatalf("pages list %d notices, the whole list %d", len(paged), len(all))
	}
	for i := range all {
		if paged[i].Node != all[i].Node || !paged[i].At.Equal(all[i].At) {
			t.Errorf("notice %d: paged %s at %v, unpaged %s at %v", i, paged[i].Node, paged[i].At, all[i].Node, all[i].At)
		}
		if paged[i].ID != all[i].ID || i > 0 && all[i].ID <= all[i-1].ID {
			t.Errorf("notice %d: id %d (paged %d), after %d: want ids growing", i, all[i].ID, paged[i].ID, all[max(i-1, 0)].ID)
		}
		if i > 0 && all[i].At.Before(all[i-1].At) {
			t.Errorf("notices %d and %d: %v after %v, want in the order they were sent", i-1, i, all[i].At, all[i-1].At)
		}
	}
	for _, q := range []string{"after=2026-11-30T12:00:00Z,x1", "after=-1", "after=x", "limit=0"} {
		if code := tp.Do("GET", "/notices?"+q, nil, nil); code != 400 {
			t.Errorf("/notices?%s: %d, want 400", q, code)
		}
	}
}

// walkPages GETs path and then each page its Link: rel="next" names,
// and returns every item and how many pages there were. A page of more
// than limit items, or more than most pages, fails t.
func walkPages[T any](t *testing.T, tp *apitest.Platform, path string, limit, most int) ([]T, int) {
	t.Helper()
	var all []T
	pages := 0
	for ; path != ""; pages++ {
		if pages == most {
			t.Fatalf("more than %d pages", most)
		}
		code, header, b := tp.Raw("GET", path, platformtest.TestToken, "")
		var page []T
		err := json.Unmarshal(b, &page)
		if err != nil || code != 200 || len(page) > limit {
			t.Fatalf("GET %s: %d, %d items, %v; want at most %d", path, code, len(page), err, limit)
		}
		all = append(all, page...)
		path = platformtest.NextLink(t, path, header)
	}
	return all, pages
}

// TestEventIDsOnTheWire: each event of GET /nodes/X/events carries its
// "id", the after= that pages on from it, in both stores.
func TestEventIDsOnTheWire(t *testing.T) { eachStore(t, testEventIDsOnTheWire) }

func testEventIDsOnTheWire(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, platformtest.Seed())
	for i := range 21 { // three overloads: six events
		if code := tp.Read("x1", platformtest.MemoryPattern(i)); code != 200 {
			t.Fatalf("reading %d: %d", i, code)
		}
		c.Add(30 * time.Second)
	}
	var page struct {
		Events []map[string]any `json:"events"`
	}
	if code := tp.Do("GET", "/nodes/x1/events", nil, &page); code != 200 {
		t.Fatalf("events: %d", code)
	}
	if len(page.Events) != 6 {
		t.Fatalf("%d events, want 6: %v", len(page.Events), page.Events)
	}
	var ids []int64
	for i, e := range page.Events {
		id, ok := e["id"].(float64)
		if !ok || id < 1 || len(ids) > 0 && int64(id) <= ids[len(ids)-1] {
			t.Fatalf("event %d: id %v, want a number above the previous event's: %v", i, e["id"], e)
		}
		if e["kind"] == nil || e["at"] == nil {
			t.Fatalf("event %d lacks its own fields: %v", i, e)
		}
		ids = append(ids, int64(id))
	}
	var rest store.EventPage
	if code := tp.Do("GET", fmt.Sprintf("/nodes/x1/events?after=%d", ids[1]), nil, &rest); code != 200 {
		t.Fatalf("events after %d: %d", ids[1], code)
	}
	var got []int64
	for _, e := range rest.Events {
		got = append(got, e.ID)
	}
	if !slices.Equal(got, ids[2:]) {
		t.Fatalf("events after %d: ids %v, want %v", ids[1], got, ids[2:])
	}
	if rest.Events[0].Kind != overload.Start || rest.Events[0].At.IsZero() {
		t.Fatalf("events after %d: the first decodes as %+v, want a start", ids[1], rest.Events[0])
	}
}

// TestOperatorBodyTrailingData: an operator's request body with more
// after its JSON object is refused (400 invalid) and nothing of it done.
func TestOperatorBodyTrailingData(t *testing.T) { eachStore(t, testOperatorBodyTrailingData) }

func testOperatorBodyTrailingData(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, platformtest.Seed())
	routes := len(tp.Node("x2").Routes)
	for _, tc := range []struct{ path, body string }{
		{"/routes", `{"node":"x2","user":"u9","key":"vpn"} junk`},
		{"/routes", `{"node":"x2","user":"u9","key":"vpn"}{"node":"x2","user":"u8","key":"vpn"}`},
		{"/price", `{"node":"x2","price":70},`},
	} {
		code, _, b := tp.Raw("POST", tc.path, platformtest.TestToken, tc.body)
		var ans map[string]any
		json.Unmarshal(b, &ans)
		if code != 400 || ans["reason"] != api.ReasonInvalid {
			t.Errorf("POST %s %s: %d %v, want 400 %q", tc.path, tc.body, code, ans, api.ReasonInvalid)
		}
	}
	if v := tp.Node("x2"); len(v.Routes) != routes || v.Price != 80 {
		t.Fatalf("x2 after refused requests: %d routes (want %d), price %d (want 80)", len(v.Routes), routes, v.Price)
	}
	if code := tp.Do("POST", "/routes", fleet.OpenRequest{Node: "x2", User: "u9", Key: "vpn"}, nil); code != 201 {
		t.Fatalf("POST /routes without trailing data: %d, want 201", code)
	}
}

// TestErrorsShowWallTimes: with the real clock, an error that names the
// time (a refused price) shows it without Go's monotonic clock reading.
func TestErrorsShowWallTimes(t *testing.T) {
	p, err := filestore.Open(store.Config{StateDir: t.TempDir()}, platformtest.Seed())
	if err != nil {
		t.Fatal(err)
	}
	f := fleet.New(p, nil)
	err = f.SetPrice(t.Context(), fleet.PriceRequest{Node: "x1", Price: -5})
	if err == nil || strings.Contains(err.Error(), "m=") {
		t.Fatalf("a negative price: %v, want an error without a monotonic reading", err)
	}
}
