package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/filestore"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// TestBadIDsAndCursors: a node id, route id, user, key or cursor that
// breaks its rule (a NUL, invalid UTF-8, too long, a character not
// allowed) answers 400 "invalid" with the rule, never 500 with the
// database's words, on both stores.
func TestBadIDsAndCursors(t *testing.T) { eachStore(t, testBadIDsAndCursors) }

func testBadIDsAndCursors(t *testing.T, open opener) {
	tp := open(&platformtest.Clock{T: platformtest.T0}, platformtest.Seed())
	long := strings.Repeat("n", 65)
	huge := strings.Repeat("z", 10000)
	for _, id := range []string{"a\x00b", "\xff\xfe", long, "a b", "a/b", "-x", "é"} {
		e := url.PathEscape(id)
		q := url.QueryEscape(id)
		for _, path := range []string{
			"/nodes/" + e, "/nodes/" + e + "/events", "/admit?node=" + q,
			"/nodes?after=" + q, "/plans?after=" + q, "/notices?after=" + url.QueryEscape("2026-11-30T12:00:00Z,"+id),
		} {
			code, _, b := tp.Raw("GET", path, platformtest.TestToken, "")
			var ans map[string]string
			json.Unmarshal(b, &ans)
			if code != 400 || ans["reason"] != api.ReasonInvalid || !strings.Contains(ans["error"], "want") {
				t.Errorf("GET %s: %d %s, want 400 invalid with the rule", path, code, b)
			}
			if len(b) > 1000 {
				t.Errorf("GET %s: an answer of %d bytes", path, len(b))
			}
		}
	}
	for _, path := range []string{"/nodes/x1/events?after=\x00", "/nodes/x1/events?after=-1", "/nodes?limit=" + huge, "/notices?after=" + huge} {
		if code, _, b := tp.Raw("GET", strings.ReplaceAll(path, "\x00", "%00"), platformtest.TestToken, ""); code != 400 || len(b) > 1000 {
			t.Errorf("GET %.60s: %d %.200s, want a short 400", path, code, b)
		}
	}
	for _, tc := range []struct{ path, body string }{
		{"/traffic", `{"route":"r\u0000","bytes":1}`},
		{"/traffic", `{"route":"` + huge + `","bytes":1}`},
		{"/routes", `{"node":"x1","user":"u\u0000","key":"vpn"}`},
		{"/routes", `{"node":"x1","user":"u","key":"` + huge + `"}`},
		{"/routes", `{"node":"x\u0000","user":"u","key":"vpn"}`},
		{"/price", `{"node":"x\u0000","price":1}`},
	} {
		code, _, b := tp.Raw("POST", tc.path, platformtest.TestToken, tc.body)
		var ans map[string]string
		json.Unmarshal(b, &ans)
		if code != 400 || ans["reason"] != api.ReasonInvalid {
			t.Errorf("POST %s %.60s: %d %.200s, want 400 invalid", tc.path, tc.body, code, b)
		}
	}
	// Good ids still answer.
	for _, path := range []string{"/nodes/x1", "/nodes/x1/events", "/admit?node=x1", "/nodes?after=x1", "/plans?after=x1"} {
		if code, _, b := tp.Raw("GET", path, platformtest.TestToken, ""); code != 200 {
			t.Errorf("GET %s: %d %s", path, code, b)
		}
	}
	if code, _, _ := tp.Raw("GET", "/nodes/nobody", platformtest.TestToken, ""); code != 404 {
		t.Errorf("GET /nodes/nobody: %d, want 404", code)
	}
}

// TestListsPageOneWay: GET /plans and /nodes/X/events page as /nodes
// and /notices do: ?limit=N, and a Link: rel="next" on a page that may
// be followed by more; walking the pages gives the whole list in order.
func TestListsPageOneWay(t *testing.T) { eachStore(t, testListsPageOneWay) }

func testListsPageOneWay(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	seed := &store.SeedFile{}
	var nodes []string
	for i := range 5 {
		id := fmt.Sprintf("e%d", i)
		nodes = append(nodes, id)
		seed.Nodes = append(seed.Nodes, routing.Node{ID: id, Role: routing.RoleExit, Country: "DE", Price: 100})
		seed.Routes = append(seed.Routes, routing.Route{ID: "r-" + id, User: "u" + id, Key: "vpn", Node: id,
			Kind: routing.KindOwn, Start: platformtest.T0.Add(-8 * time.Hour), LastTraffic: platformtest.T0.Add(-5 * time.Hour)})
	}
	tp := open(c, seed)
	// Each node overloaded, closing its idle route, then back: a plan
	// each, and a few events each.
	tp.ReadRounds(nodes, 95, 3)
	tp.ReadRounds(nodes, 10, 5)
	var all []routing.Plan
	if code := tp.Do("GET", "/plans", nil, &all); code != 200 || len(all) != 5 {
		t.Fatalf("/plans: %d, %d plans, want 5", code, len(all))
	}
	paged, pages := walkPages[routing.Plan](t, tp, "/plans?limit=2", 2, 4)
	if pages != 3 || len(paged) != 5 {
		t.Errorf("/plans?limit=2: %d plans in %d pages, want 5 in 3", len(paged), pages)
	}
	for i := range min(len(paged), len(all)) {
		if paged[i].Node != all[i].Node {
			t.Errorf("plan %d: paged of %s, unpaged of %s", i, paged[i].Node, all[i].Node)
		}
	}

	code, header, b := tp.Raw("GET", "/nodes/e0/events", platformtest.TestToken, "")
	var first store.EventPage
	if err := json.Unmarshal(b, &first); code != 200 || err != nil || len(first.Events) < 2 {
		t.Fatalf("/nodes/e0/events: %d %v, want 2 or more events: %s", code, err, b)
	}
	if l := header.Get("Link"); l != "" {
		t.Errorf("/nodes/e0/events, every event: Link %q, want none", l)
	}
	if strings.Contains(string(b), `"next"`) {
		t.Errorf("/nodes/e0/events: a body \"next\": %s", b)
	}
	got := tp.AllEvents("e0", 1)
	if len(got) != len(first.Events) {
		t.Fatalf("one at a time by Link: %d events, want %d", len(got), len(first.Events))
	}
	for i := range got {
		if got[i].ID != first.Events[i].ID {
			t.Errorf("event %d: id %d by Link, %d in one page", i, got[i].ID, first.Events[i].ID)
		}
	}
	_, header, _ = tp.Raw("GET", "/nodes/e0/events?limit=1", platformtest.TestToken, "")
	if want := fmt.Sprintf(`</nodes/e0/events?after=%d&limit=1>; rel="next"`, first.Events[0].ID); header.Get("Link") != want {
		t.Errorf("/nodes/e0/events?limit=1: Link %q, want %q", header.Get("Link"), want)
	}
}

// TestReportDecodeAsJSON: a body POST /report refuses gets the words
// json.Unmarshal gives, whichever decoder found it wrong, and one it
// takes is answered as writeJSON writes the answer.
func TestReportDecodeAsJSON(t *testing.T) {
	c := &platformtest.Clock{T: platformtest.T0.Add(time.Hour)}
	p, err := filestore.Open(store.Config{StateDir: t.TempDir(), Now: c.Now}, platformtest.Seed())
	if err != nil {
		t.Fatal(err)
	}
	h := api.Handler(fleet.New(p, nil), api.Tokens{platformtest.TestToken: ""})
	for _, body := range []string{
		`{`, `null`, `[]`, `{"v":1}x`, `{"v":3,"node":"x1"}`, `{"V":1,"node":"x1"}`,
		`{"v":1,"node":"x1","at":"2026-11-30T12:00:00Z","cpus":1.5,"conntrack_max":1}`,
		`{"v":1,"node":"x1","at":"2026-11-30T12:00:00Z","cpus":1,"conntrack_max":1,"cpus":2}`,
		`{"v":1,"node":"x1","at":"2026-11-30T12:00:00Z","cpus":0,"conntrack_max":1,"load15":-1}`,
		`{"v":1,"node":"x\u0031","at":"2026-11-30T12:00:00Z","cpus":1,"conntrack_max":1,"missing":["x"]}`,
		`{"v":2,"node":"x1","at":"nope","cpus":1,"conntrack_max":1}`,
		`{"v":1,"node":"x1","at":"2026-11-30T12:00:00Z","cpus":1,"conntrack_max":1,"memory_used_percent":95}`,
		` {"v":1,"node":"x1","at":"2026-11-30T12:00:30Z","cpus":1,"conntrack_max":1,"extra":{"a":[1]}} `,
	} {
		req := httptest.NewRequest("POST", "/report", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+platformtest.TestToken)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var rd overload.Reading
		if err := json.Unmarshal([]byte(body), &rd); err != nil {
			var ans map[string]string
			json.Unmarshal(w.Body.Bytes(), &ans)
			if want := "reading: " + err.Error(); w.Code != 400 || ans["error"] != want {
				t.Errorf("%s: %d %s, want 400 %q", body, w.Code, w.Body, want)
			}
			continue
		}
		var out struct {
			fleet.ReportOutcome
			Duplicate bool `json:"duplicate,omitempty"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); w.Code != 200 || err != nil {
			t.Fatalf("%s: %d %s", body, w.Code, w.Body)
		}
		want, _ := json.MarshalIndent(out, "", "  ")
		if got := w.Body.String(); got != string(want)+"\n" || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: answer %q (%s), want %q", body, got, w.Header().Get("Content-Type"), want)
		}
	}
}

// TestStalledBody: a client that sends part of a body and stalls past
// the server's read timeout, with its length given or chunked, on
// POST /report and on an operator's POST, is answered 408 "incomplete"
// with Retry-After, which the agent sends again, never 413 "too_large",
// which it drops.
func TestStalledBody(t *testing.T) {
	p, err := filestore.Open(store.Config{StateDir: t.TempDir(), Logger: platformtest.Logger(t)}, platformtest.Seed())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.Handler(fleet.New(p, nil), api.Tokens{platformtest.TestToken: ""}), ReadHeaderTimeout: api.ReadHeaderTimeout,
		ReadTimeout: time.Second, WriteTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	reading := `{"v":1,"node":"x1","at":"2026-11-30T12:00:00Z","memory_used_percent":50}`
	for _, tt := range []struct{ name, path, header, part string }{
		{"report, length", "/report", fmt.Sprintf("Content-Length: %d\r\n", len(reading)), reading[:20]},
		{"report, chunked", "/report", "Transfer-Encoding: chunked\r\n", fmt.Sprintf("%x\r\n%s\r\n", 20, reading[:20])},
		{"routes, length", "/routes", "Content-Length: 100\r\n", `{"node":"x1",`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: platform\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n%s\r\n%s",
				tt.path, platformtest.TestToken, tt.header, tt.part)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), `"reason":"incomplete"`) {
				t.Errorf("answered %s, Retry-After %q: %s; want 408 incomplete with Retry-After", resp.Status, resp.Header.Get("Retry-After"), b)
			}
		})
	}
}

// TestBadRequests: a body that leaves out a field its endpoint needs
// (a price, a max_users, a route's bytes) answers 400 invalid naming the
// field and changes nothing, rather than setting it to 0 (a free node, no
// cap, a route marked in use by no traffic); a path no endpoint has, or a
// method the path does not take, answers 404 or 405 in JSON like every
// other refusal, saying the method and path (and, for 405, the methods
// it takes, as Allow does), on both stores.
func TestBadRequests(t *testing.T) { eachStore(t, testBadRequests) }

func testBadRequests(t *testing.T, open opener) {
	tp := open(&platformtest.Clock{T: platformtest.T0}, platformtest.Seed())
	for _, tc := range []struct{ path, body, field string }{
		{"/price", `{"node":"x1"}`, `"price"`},
		{"/price", `{"price":5}`, `"node"`},
		{"/max-users", `{"node":"x1"}`, `"max_users"`},
		{"/traffic", `{"route":"r-only"}`, `"bytes"`},
		{"/routes", `{"node":"x1","key":"vpn"}`, "user"},
	} {
		code, _, b := tp.Raw("POST", tc.path, platformtest.TestToken, tc.body)
		var ans map[string]string
		json.Unmarshal(b, &ans)
		if code != 400 || ans["reason"] != api.ReasonInvalid || !strings.Contains(ans["error"], tc.field) {
			t.Errorf("POST %s %s: %d %s, want 400 invalid naming %s", tc.path, tc.body, code, b, tc.field)
		}
	}
	n := tp.Node("x1")
	if n.Price != 100 || n.MaxUsers != 0 {
		t.Errorf("x1 after the refusals: price %d, max_users %d; want 100 and 0 as seeded", n.Price, n.MaxUsers)
	}
	for _, r := range n.Routes {
		if r.Route.ID == "r-only" && !r.Route.LastTraffic.Equal(platformtest.T0.Add(-time.Minute)) {
			t.Errorf("r-only marked in use at %v by a refused /traffic", r.Route.LastTraffic)
		}
	}
	for _, tc := range []struct {
		method, path string
		code         int
		says, allow  string
	}{
		{"GET", "/price", 405, "GET /price", "POST"},
		{"DELETE", "/nodes/x1", 405, "DELETE /nodes/x1", "GET, HEAD"},
		{"PUT", "/report", 405, "PUT /report", "POST"},
		{"GET", "/no-such-endpoint", 404, "GET /no-such-endpoint", ""},
		{"GET", "/nodes/x1/nothing", 404, "GET /nodes/x1/nothing", ""},
	} {
		code, h, b := tp.Raw(tc.method, tc.path, platformtest.TestToken, "")
		var ans map[string]string
		err := json.Unmarshal(b, &ans)
		if code != tc.code || err != nil || !strings.Contains(ans["error"], tc.says) || ans["reason"] == "" {
			t.Errorf("%s %s: %d %q, want %d in JSON saying %q", tc.method, tc.path, code, b, tc.code, tc.says)
		}
		if got := h.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
		if tc.allow != "" && !strings.Contains(ans["error"], tc.allow) {
			t.Errorf("%s %s: %q does not say the methods it takes (%s)", tc.method, tc.path, ans["error"], tc.allow)
		}
	}
}
