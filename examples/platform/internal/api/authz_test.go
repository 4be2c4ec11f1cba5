package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// The authorization table of docs/platform.md, as the matrix test walks
// it: for each endpoint, the status each kind of token gets on operator
// A's node, on operator B's and on a node that does not exist.
type authzRow struct {
	method, path string // path with X for the node
	body         string // with X for the node; "" for none
	// by token kind: admin, opA, opB, agentA (the agent of A's node a1), none
	want map[string][3]int
	// via is how the token goes: "" as a bearer token, "login" as the
	// login form's token, "form" as a dashboard session logged in with
	// it (an operator's; the others cannot log in, so they send it as a
	// bearer token, which the dashboard's forms do not take), with the
	// session's CSRF token and body as a form.
	via string
}

// Nodes of the matrix: A's, B's, and one that does not exist.
var authzNodes = [3]string{"a1", "b1", "zz"}

func authzTable() []authzRow {
	all := func(code int) [3]int { return [3]int{code, code, code} }
	own := func(ok int) map[string][3]int { // the admin any node; an operator their own
		return map[string][3]int{"admin": {ok, ok, 404}, "opA": {ok, 404, 404}, "opB": {404, ok, 404}, "agentA": all(403), "none": all(401)}
	}
	admin := func(ok, unknown int) map[string][3]int { // the admin's alone
		return map[string][3]int{"admin": {ok, ok, unknown}, "opA": all(403), "opB": all(403), "agentA": all(403), "none": all(401)}
	}
	operator := func(ok [3]int) map[string][3]int { // an operator's own receiver: no node
		return map[string][3]int{"admin": all(403), "opA": ok, "opB": ok, "agentA": all(403), "none": all(401)}
	}
	list := func() map[string][3]int { // every token but an agent's; what it lists is checked apart
		return map[string][3]int{"admin": all(200), "opA": all(200), "opB": all(200), "agentA": all(403), "none": all(401)}
	}
	form := func(ok [3]int) map[string][3]int { // a dashboard form: an operator's session alone
		return map[string][3]int{"admin": all(401), "opA": ok, "opB": {ok[1], ok[0], ok[2]}, "agentA": all(401), "none": all(401)}
	}
	return []authzRow{
		{"POST", "/report", `{"v":1,"node":"X","at":"AT","memory_used_percent":40,"cpus":4,"conntrack_max":262144}`,
			map[string][3]int{"admin": all(200), "opA": all(403), "opB": all(403), "agentA": {200, 403, 403}, "none": all(401)}, ""},
		{"GET", "/admit?node=X", "", admin(200, 404), ""},
		{"POST", "/routes", `{"node":"X","user":"u-AT","key":"vpn"}`, admin(201, 404), ""},
		{"POST", "/traffic", `{"route":"r-X","bytes":100}`, admin(200, 404), ""},
		{"POST", "/price", `{"node":"X","price":PRICE}`, own(204), ""},
		{"POST", "/max-users", `{"node":"X","max_users":50}`, own(204), ""},
		{"GET", "/nodes", "", list(), ""},
		{"GET", "/nodes/X", "", own(200), ""},
		{"GET", "/nodes/X/events", "", own(200), ""},
		{"GET", "/notices", "", list(), ""},
		{"POST", "/notices/NOTICE/redeliver", "", own(202), ""},
		{"GET", "/plans", "", admin(200, 200), ""},
		{"POST", "/nodes/X/pause", "", admin(204, 404), ""},
		{"POST", "/nodes/X/approve", "", admin(204, 404), ""},
		{"PUT", "/receiver", `{"url":"http://127.0.0.1:9/hook"}`, operator([3]int{201, 200, 200}), ""},
		{"GET", "/receiver", "", operator(all(200)), ""},
		{"POST", "/receiver/rotate", "", operator(all(200)), ""},
		{"POST", "/receiver/test", "", operator(all(200)), ""},
		{"POST", "/receiver/enable", "", operator(all(200)), ""},
		{"GET", "/metrics", "", admin(200, 200), ""},
		{"GET", "/healthz", "", map[string][3]int{"admin": all(200), "opA": all(200), "opB": all(200), "agentA": all(200), "none": all(200)}, ""},
		{"GET", "/readyz", "", map[string][3]int{"admin": all(200), "opA": all(200), "opB": all(200), "agentA": all(200), "none": all(200)}, ""},
		{"POST", "/login", "", map[string][3]int{"admin": all(403), "opA": all(303), "opB": all(303), "agentA": all(403), "none": all(401)}, "login"},
		{"POST", "/dashboard/price", "node=X&price=PRICE", form([3]int{303, 404, 404}), "form"},
		{"POST", "/dashboard/max-users", "node=X&max_users=50", form([3]int{303, 404, 404}), "form"},
		{"POST", "/dashboard/notices/NOTICE/redeliver", "", form([3]int{303, 404, 404}), "form"},
		{"POST", "/dashboard/receiver", "url=http%3A%2F%2F127.0.0.1%3A9%2Fhook", form(all(303)), "form"},
		{"POST", "/dashboard/receiver/rotate", "", form(all(303)), "form"},
		{"POST", "/dashboard/receiver/test", "", form(all(303)), "form"},
		{"POST", "/dashboard/receiver/enable", "", form(all(303)), "form"},
		{"POST", "/logout", "", form(all(303)), "form"},
	}
}

// TestAuthorizationMatrix walks every endpoint of the table, the
// dashboard's login and forms included, × every kind of token (admin,
// operator A, operator B, A's node's agent, none) × every kind of node
// (A's, B's, unknown) on both stores and compares each answer with the
// table; an operator's answer for another's node is the unknown node's,
// byte for byte, and the lists show an operator only their own nodes and
// notices.
func TestAuthorizationMatrix(t *testing.T) {
	eachNotifyStore(t, func(t *testing.T, open notifyOpener, _ int) {
		c := &platformtest.Clock{T: platformtest.T0}
		h := newHook(t, c, platformtest.HookSecret)
		cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
		testAuthorizationMatrix(t, c, func(seed *store.SeedFile) notifyPlatform { return open(c, cfg, seed) })
	})
}

func testAuthorizationMatrix(t *testing.T, c *platformtest.Clock, open func(seed *store.SeedFile) notifyPlatform) {
	seed := dashboardSeed()
	tp := open(seed)
	f := fleet.New(tp.Svc, tp.n)
	f.Owners = seed.Operators
	srv := httptest.NewServer(api.Handler(f, dashboardTokens))
	defer srv.Close()
	tokenOf := map[string]string{"admin": platformtest.TestToken, "opA": "tok-alice", "opB": "tok-bob", "agentA": "tok-a1", "none": ""}
	web := &apitest.Platform{T: t, Srv: srv}
	do := func(method, path, token, body string) (int, string) {
		t.Helper()
		code, _, b := web.Raw(method, path, token, body)
		return code, string(b)
	}
	browser := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// send makes a request as a browser does: a form, with cookie (if
	// not nil) or else token as a bearer token.
	send := func(method, path, token string, cookie *http.Cookie, form string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if cookie != nil {
			req.AddCookie(cookie)
		} else if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	csrfField := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
	// doRow makes row's request with kind's token, as row.via says.
	doRow := func(row authzRow, kind, path, body string) (int, string) {
		t.Helper()
		token := tokenOf[kind]
		switch row.via {
		case "login":
			resp, b := send(row.method, path, "", nil, url.Values{"token": {token}}.Encode())
			return resp.StatusCode, b
		case "form":
			if kind != "opA" && kind != "opB" {
				resp, b := send(row.method, path, token, nil, body)
				return resp.StatusCode, b
			}
			resp, _ := send("POST", "/login", "", nil, url.Values{"token": {token}}.Encode())
			if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
				t.Fatalf("login with %s's token: %s", kind, resp.Status)
			}
			cookie := resp.Cookies()[0]
			_, page := send("GET", "/", "", cookie, "")
			m := csrfField.FindStringSubmatch(page)
			if m == nil {
				t.Fatalf("%s's page has no CSRF field:\n%s", kind, page)
			}
			if body != "" {
				body += "&"
			}
			resp, b := send(row.method, path, "", cookie, body+"csrf="+m[1])
			return resp.StatusCode, b
		}
		return do(row.method, path, token, body)
	}
	// A notice for each of A's and B's nodes, and the overload over
	// since well past its cool-down.
	for _, n := range []string{"a1", "b1"} {
		for i := range 8 {
			c.Add(time.Second)
			mem := 95.0
			if i >= 3 {
				mem = 40
			}
			rd, _ := json.Marshal(overload.Reading{Node: n, At: c.Now(), MemoryUsedPercent: mem, CPUs: 4, ConntrackMax: 262144})
			if code, b := do("POST", "/report", platformtest.TestToken, string(rd)); code != 200 {
				t.Fatalf("reading of %s: %d %s", n, code, b)
			}
		}
	}
	c.Add(time.Hour)
	var ns []store.NumberedNotice
	if code, b := do("GET", "/notices", platformtest.TestToken, ""); code != 200 || json.Unmarshal([]byte(b), &ns) != nil || len(ns) != 2 {
		t.Fatalf("notices: %d %s", code, b)
	}
	noticeOf := map[string]string{"zz": "999999"}
	for _, n := range ns {
		noticeOf[n.Node] = fmt.Sprint(n.ID)
	}
	price := 100
	kinds := []string{"admin", "opA", "opB", "agentA", "none"}
	for _, row := range authzTable() {
		for _, kind := range kinds {
			bodies := [3]string{}
			for i, node := range authzNodes {
				c.Add(time.Second)
				price++
				if row.path == "/report" && i == 2 && kind == "admin" {
					node = "zz-report" // the admin's reading of a node never seen creates it
				}
				r := strings.NewReplacer("X", node, "AT", c.Now().Format(time.RFC3339Nano), "PRICE", fmt.Sprint(price), "NOTICE", noticeOf[node])
				code, body := doRow(row, kind, r.Replace(row.path), r.Replace(row.body))
				bodies[i] = body
				if want := row.want[kind][i]; code != want {
					t.Errorf("%s %s with %s's token on %s: %d, want %d: %s", row.method, row.path, kind, []string{"A's node", "B's node", "an unknown node"}[i], code, want, strings.TrimSpace(body))
				}
			}
			// Another operator's node answers as an unknown one.
			other := map[string]int{"opA": 1, "opB": 0}
			if i, ok := other[kind]; ok && row.want[kind][i] == 404 {
				// Byte for byte, though the two name different nodes: a
				// body naming the node asked for would tell them apart.
				if got, want := bodies[i], bodies[2]; got != want {
					t.Errorf("%s %s with %s's token: another's node answers\n%s\nwhere an unknown node answers\n%s", row.method, row.path, kind, bodies[i], bodies[2])
				}
			}
		}
	}
	// What the lists show an operator: their own nodes and notices alone.
	for kind, want := range map[string][2]string{"opA": {`"a1"`, `"b1"`}, "opB": {`"b1"`, `"a1"`}} {
		for _, path := range []string{"/nodes", "/notices"} {
			code, body := do("GET", path, tokenOf[kind], "")
			if code != 200 || !strings.Contains(body, want[0]) || strings.Contains(body, want[1]) {
				t.Errorf("GET %s with %s's token: %d, want %s listed and %s not:\n%s", path, kind, code, want[0], want[1], body)
			}
		}
	}
	// An operator's view never shows a user's id, key or route id.
	if _, body := do("GET", "/nodes/a1", tokenOf["opA"], ""); strings.Contains(body, "ua") || strings.Contains(body, "r-a1") || strings.Contains(body, `"key"`) {
		t.Errorf("operator A's view of a1 shows users' data:\n%s", body)
	}
}

// TestPauseAndApprove: the admin pauses a node: from that moment it takes
// nobody new, its operator's view says so in the help page's words, and
// an approval gives routing back; each is an event in the node's event
// list (a second pause of a paused node is none), after the overload's
// start and end, which keep their ids, and across a restart. An operator
// sets their node's max_users and sees it.
func TestPauseAndApprove(t *testing.T) { eachStore(t, testPauseAndApprove) }

func testPauseAndApprove(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, platformtest.Seed())
	f := fleet.New(tp.Svc, nil)
	srv := httptest.NewServer(api.Handler(f, api.Tokens{platformtest.TestToken: "", "tok-alice": "operator:alice", "tok-x1": "x1 operator:alice"}))
	defer srv.Close()
	do := func(method, path, token, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			json.NewDecoder(resp.Body).Decode(out)
		}
		return resp.StatusCode
	}
	status := func() fleet.OperatorView {
		t.Helper()
		var v fleet.OperatorView
		if code := do("GET", "/nodes/x1", "tok-alice", "", &v); code != 200 {
			t.Fatalf("operator's view of x1: %d", code)
		}
		return v
	}
	if v := status(); v.Status != fleet.StatusWordsAdmitted || v.Paused {
		t.Fatalf("x1 before a pause: %+v", v)
	}
	if code := do("POST", "/nodes/x1/pause", platformtest.TestToken, "", nil); code != 204 {
		t.Fatalf("pause: %d", code)
	}
	var a fleet.AdmitAnswer
	if do("GET", "/admit?node=x1", platformtest.TestToken, "", &a); a.Admit || a.Reason != string(routing.ReasonPaused) {
		t.Errorf("admit of a paused node: %+v", a)
	}
	if v := status(); v.Status != "routing paused: the node is being emptied" || !v.Paused {
		t.Errorf("the operator's view of a paused node: %q, paused %v", v.Status, v.Paused)
	}
	if code := do("POST", "/routes", platformtest.TestToken, `{"node":"x1","user":"u9","key":"vpn"}`, nil); code != 409 {
		t.Errorf("a route through a paused node: %d, want 409", code)
	}
	if code := do("POST", "/nodes/x1/pause", platformtest.TestToken, "", nil); code != 204 {
		t.Fatalf("a second pause: %d", code)
	}
	if code := do("POST", "/nodes/x1/approve", platformtest.TestToken, "", nil); code != 204 {
		t.Fatalf("approve: %d", code)
	}
	if do("GET", "/admit?node=x1", platformtest.TestToken, "", &a); !a.Admit {
		t.Errorf("admit of an approved node: %+v", a)
	}
	events := func(f *fleet.Fleet) string {
		t.Helper()
		pg, err := f.Events(t.Context(), "x1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range pg.Events {
			got = append(got, fmt.Sprintf("%d:%s", e.ID, e.Kind))
		}
		return strings.Join(got, " ")
	}
	if got, want := events(f), "1:paused 2:approved"; got != want {
		t.Errorf("x1's events after a pause, another and an approval: %q, want %q", got, want)
	}
	var page struct {
		Events []struct {
			ID   int64              `json:"id"`
			Kind overload.EventKind `json:"kind"`
		} `json:"events"`
	}
	if code := do("GET", "/nodes/x1/events", "tok-alice", "", &page); code != 200 || len(page.Events) != 2 ||
		page.Events[0].Kind != store.EventPaused || page.Events[1].Kind != store.EventApproved {
		t.Errorf("the operator's x1 events: %d %+v, want paused then approved", code, page.Events)
	}
	if v := status(); len(v.Events) != 2 || v.Events[0].Kind != store.EventPaused || v.Events[1].Kind != store.EventApproved {
		t.Errorf("the operator's view's events: %+v, want paused then approved", v.Events)
	}
	if code := do("POST", "/max-users", "tok-alice", `{"node":"x1","max_users":1}`, nil); code != 204 {
		t.Fatalf("max-users: %d", code)
	}
	if v := status(); v.MaxUsers != 1 || v.Status != fleet.StatusWordsFull {
		t.Errorf("after max_users 1 with its users live: max_users %d, %q", v.MaxUsers, v.Status)
	}
	if code := do("POST", "/max-users", "tok-alice", `{"node":"x1","max_users":-1}`, nil); code != 400 {
		t.Errorf("max-users -1: %d, want 400", code)
	}
	// An overload's start comes after them, and they stay across a
	// restart.
	for i, mem := range []float64{95, 95, 95} {
		c.Add(30 * time.Second)
		r := platformtest.Reading("x1", i+1, mem)
		r.At = c.Now()
		if _, err := f.Report(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	again := open(c, platformtest.Seed())
	for _, ff := range []*fleet.Fleet{f, fleet.New(again.Svc, nil)} {
		if got, want := events(ff), "1:paused 2:approved 3:start"; got != want {
			t.Errorf("x1's events after an overload's start (and on a restart): %q, want %q", got, want)
		}
	}
}
