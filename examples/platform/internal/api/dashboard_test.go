package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// dashboardTokens are the test's tokens: the admin, operators alice (a1)
// and bob (b1), and a1's agent.
var dashboardTokens = api.Tokens{platformtest.TestToken: "", "tok-alice": "operator:alice", "tok-bob": "operator:bob", "tok-a1": "a1 operator:alice"}

// dashboardSeed is A's node a1 and B's node b1, each with a user's route.
func dashboardSeed() *store.SeedFile {
	start := platformtest.T0.Add(-8 * time.Hour)
	return &store.SeedFile{
		Nodes: []routing.Node{
			{ID: "a1", Role: routing.RoleExit, Country: "DE", Price: 100},
			{ID: "b1", Role: routing.RoleExit, Country: "DE", Price: 100},
		},
		Routes: []routing.Route{
			{ID: "r-a1", User: "user-ua", Key: "key-vpn", Node: "a1", Kind: routing.KindOwn, Start: start, LastTraffic: platformtest.T0},
			{ID: "r-b1", User: "user-ub", Key: "key-vpn", Node: "b1", Kind: routing.KindOwn, Start: start, LastTraffic: platformtest.T0},
		},
		Operators: map[string]string{"b1": "bob"},
	}
}

// browser is a client of the dashboard as a browser on its page sends
// requests: same-origin, redirects not followed, its cookie set by hand.
type browser struct {
	t   *testing.T
	srv *httptest.Server
}

// pageAnswer is a page's status, cookies and body.
type pageAnswer struct {
	code    int
	cookies []*http.Cookie
	body    string
}

// do sends method path with form (nil: none), the session cookie (""
// for none) and the headers hdr; by default Sec-Fetch-Site: same-origin.
func (b browser) do(method, path string, form url.Values, cookie string, hdr ...string) pageAnswer {
	b.t.Helper()
	var rd io.Reader
	if form != nil {
		rd = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.srv.URL+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: "session", Value: cookie})
	}
	c := b.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return pageAnswer{resp.StatusCode, resp.Cookies(), string(body)}
}

// login logs in with token and returns the session cookie's value and
// the page's CSRF token.
func (b browser) login(token string) (cookie, csrf string) {
	b.t.Helper()
	a := b.do("POST", "/login", url.Values{"token": {token}}, "")
	if a.code != http.StatusSeeOther || len(a.cookies) != 1 {
		b.t.Fatalf("login: %d, cookies %v: %s", a.code, a.cookies, a.body)
	}
	cookie = a.cookies[0].Value
	return cookie, csrfOf(b.t, b.do("GET", "/", nil, cookie).body)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF field in the page:\n%s", page)
	}
	return m[1]
}

// expect checks a's status and that its body holds every one of want.
func expect(t *testing.T, what string, a pageAnswer, code int, want ...string) {
	t.Helper()
	if a.code != code {
		t.Errorf("%s: %d, want %d: %s", what, a.code, code, a.body)
	}
	for _, w := range want {
		if !strings.Contains(a.body, w) {
			t.Errorf("%s: the page lacks %q:\n%s", what, w, a.body)
		}
	}
}

// dashboardPlatform serves the dashboard test's platform, with a
// notice for each of a1 and b1, delivered to a receiver; the use cases'
// log is kept in the returned buffer.
func dashboardPlatform(t *testing.T, open notifyOpener) (browser, *platformtest.Clock, *testkit.LogBuffer, notifyPlatform) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	np := open(c, cfg, dashboardSeed())
	np.Svc = &receiverReads{Store: np.Svc}
	f := fleet.New(np.Svc, np.n)
	f.Owners = dashboardSeed().Operators
	logs := &testkit.LogBuffer{}
	r := *f.Rules
	r.Log = slog.New(slog.NewTextHandler(logs, nil))
	f.Rules = &r
	srv := httptest.NewServer(api.Handler(f, dashboardTokens))
	t.Cleanup(srv.Close)
	b := browser{t, srv}
	report := func(node string, mem float64) {
		t.Helper()
		c.Add(time.Second)
		rd, _ := json.Marshal(overload.Reading{Node: node, At: c.Now(), MemoryUsedPercent: mem, CPUs: 4, ConntrackMax: 262144})
		req, _ := http.NewRequest("POST", srv.URL+"/report", strings.NewReader(string(rd)))
		req.Header.Set("Authorization", "Bearer "+platformtest.TestToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("reading of %s: %d", node, resp.StatusCode)
		}
	}
	for _, n := range []string{"a1", "b1"} {
		for range 3 {
			report(n, 95)
		}
	}
	drain(t, np.n)
	return b, c, logs, np
}

// receiverReads is a store that counts its reads of the operators'
// receivers: all of them (OperatorReceivers) and one operator's
// (OperatorReceiver).
type receiverReads struct {
	store.Store
	all, one atomic.Int64
}

func (s *receiverReads) OperatorReceivers(ctx context.Context) (map[string]store.OperatorReceiver, error) {
	s.all.Add(1)
	return s.Store.OperatorReceivers(ctx)
}

func (s *receiverReads) OperatorReceiver(ctx context.Context, operator string) (store.OperatorReceiver, bool, error) {
	s.one.Add(1)
	return s.Store.OperatorReceiver(ctx, operator)
}

// TestDashboardReadsOneReceiver: a page reads the store once for its
// operator's receiver, and never every operator's, with a receiver set
// or not; what another replica changed since shows on the next page.
func TestDashboardReadsOneReceiver(t *testing.T) {
	eachNotifyStore(t, func(t *testing.T, open notifyOpener, _ int) {
		b, _, _, np := dashboardPlatform(t, open)
		reads := np.Svc.(*receiverReads)
		// Other operators' receivers, which alice's page must not read.
		for i := range 5 {
			if err := np.Svc.UpdateReceiver(t.Context(), fmt.Sprintf("op%d", i), func(r *store.OperatorReceiver, now time.Time) error {
				*r = store.OperatorReceiver{URL: fmt.Sprintf("http://127.0.0.1:9/op%d", i), Secrets: []store.OperatorSecret{{Key: []byte("0123456789abcdef01234567")}}, Created: now}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		alice, csrf := b.login("tok-alice")
		page := func(what string, want ...string) {
			t.Helper()
			all, one := reads.all.Load(), reads.one.Load()
			expect(t, what, b.do("GET", "/", nil, alice), 200, want...)
			if all, one := reads.all.Load()-all, reads.one.Load()-one; all != 0 || one != 1 {
				t.Errorf("%s: read every operator's receiver %d times and one operator's %d times, want 0 and 1", what, all, one)
			}
		}
		page("alice's page without a receiver", "Not set")
		expect(t, "her receiver set", b.do("POST", "/dashboard/receiver", url.Values{"csrf": {csrf}, "url": {"http://127.0.0.1:9/alice"}}, alice), 303)
		page("her page with one", "Your nodes' notices go to http://127.0.0.1:9")
		// Changed by another replica: read as it is now, not as this one
		// last saw it.
		if err := np.Svc.UpdateReceiver(t.Context(), "alice", func(r *store.OperatorReceiver, now time.Time) error {
			r.FailingSince, r.Disabled = now.Add(-store.FailFor), now
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		page("her page once it is disabled", `id="receiver-state"`, "Enable it again")
	})
}

// TestDashboard logs operators in and out and walks the pages and forms
// on both stores: each operator sees and sets their own nodes alone, in
// the help page's words, never a user's id, key or route; every bad
// request is refused with a status and words, and logged without the
// token.
func TestDashboard(t *testing.T) {
	eachNotifyStore(t, func(t *testing.T, open notifyOpener, _ int) {
		b, c, logs, _ := dashboardPlatform(t, open)

		expect(t, "GET / without a session", b.do("GET", "/", nil, ""), 200, `<form method="post" action="/login">`)
		expect(t, "a login with a wrong token", b.do("POST", "/login", url.Values{"token": {"tok-wrong"}}, ""), 401, "This token is not known")
		expect(t, "a login without a token", b.do("POST", "/login", url.Values{}, ""), 401, "This token is not known")
		expect(t, "the admin's login", b.do("POST", "/login", url.Values{"token": {platformtest.TestToken}}, ""), 403, "The admin&#39;s token does not log in here")
		expect(t, "an agent's login", b.do("POST", "/login", url.Values{"token": {"tok-a1"}}, ""), 403, "A node&#39;s agent token only reports")
		for _, h := range [][]string{{"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Site", "same-site"}, {"Sec-Fetch-Site", "", "Origin", "http://evil.example"}} {
			a := b.do("POST", "/login", url.Values{"token": {"tok-alice"}}, "", h...)
			expect(t, fmt.Sprintf("a cross-site login (%s)", h), a, 403, "This request came from another site: nothing was done.")
			if len(a.cookies) != 0 {
				t.Errorf("a cross-site login set a cookie: %v", a.cookies)
			}
		}

		// A token pasted with the line's end or spaces around it is the
		// same token: a token holds no white space.
		if a := b.do("POST", "/login", url.Values{"token": {" tok-alice\r\n"}}, ""); a.code != http.StatusSeeOther || len(a.cookies) != 1 {
			t.Errorf("a login with white space around alice's token: %d %v, want 303 and a session", a.code, a.cookies)
		}

		// Alice logs in: a session cookie, not her token.
		a := b.do("POST", "/login", url.Values{"token": {"tok-alice"}}, "")
		if a.code != http.StatusSeeOther || len(a.cookies) != 1 {
			t.Fatalf("alice's login: %d %v", a.code, a.cookies)
		}
		ck := a.cookies[0]
		if ck.Name != "session" || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/" ||
			!regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(ck.Value) || ck.MaxAge != int(api.SessionLifetime/time.Second) {
			t.Errorf("the session cookie over plain HTTP: %+v", ck)
		}
		alice := ck.Value
		page := b.do("GET", "/", nil, alice)
		expect(t, "alice's page", page, 200, `id="node-a1"`, fleet.StatusWordsOverloaded, "Overloaded since 2026-11-30 12:00:03 UTC", "memory at 95 %",
			"overload started", `id="notice-`, "a1 is overloaded", "delivered", "HTTP 200", "/redeliver", "Set price", "Set max_users",
			`id="receiver-a1"`, "To http://127.0.0.1:", "(the platform's receiver for every node)")
		for _, never := range []string{"b1", "bob", "user-ua", "key-vpn", "r-a1", "/hook", "tok-alice"} {
			if regexp.MustCompile(`\b` + regexp.QuoteMeta(never) + `\b`).MatchString(page.body) {
				t.Errorf("alice's page shows %q:\n%s", never, page.body)
			}
		}
		if strings.Contains(page.body, "<script") {
			t.Error("alice's page holds a script")
		}
		csrfA := csrfOf(t, page.body)
		bob, csrfB := b.login("tok-bob")
		pageB := b.do("GET", "/", nil, bob)
		expect(t, "bob's page", pageB, 200, `id="node-b1"`, "b1 is overloaded")
		if regexp.MustCompile(`\b(a1|alice)\b`).MatchString(pageB.body) {
			t.Errorf("bob's page shows alice's node:\n%s", pageB.body)
		}
		if csrfA == csrfB || alice == bob {
			t.Error("two sessions share a cookie or a CSRF token")
		}
		noticeA := regexp.MustCompile(`id="notice-(\d+)"`).FindStringSubmatch(page.body)[1]
		noticeB := regexp.MustCompile(`id="notice-(\d+)"`).FindStringSubmatch(pageB.body)[1]

		// Forms on her own node, and on bob's, which answers as a node
		// that does not exist.
		form := func(kv ...string) url.Values {
			v := url.Values{"csrf": {csrfA}}
			for i := 0; i+1 < len(kv); i += 2 {
				v.Set(kv[i], kv[i+1])
			}
			return v
		}
		expect(t, "alice's price", b.do("POST", "/dashboard/price", form("node", "a1", "price", "120"), alice), 303)
		expect(t, "her page after it", b.do("GET", "/", nil, alice), 200, "The price of a1 is 120 from now on.", `value="120"`)
		expect(t, "her max_users", b.do("POST", "/dashboard/max-users", form("node", "a1", "max_users", "40"), alice), 303)
		expect(t, "her page after it", b.do("GET", "/", nil, alice), 200, "The max_users of a1 is 40.", `value="40"`)
		expect(t, "a redelivery of her notice", b.do("POST", "/dashboard/notices/"+noticeA+"/redeliver", form(), alice), 303)
		expect(t, "her page after it", b.do("GET", "/", nil, alice), 200, "is to be delivered again", "pending")
		for _, tc := range []struct {
			path string
			form url.Values
			want string
		}{
			{"/dashboard/price", form("node", "NODE", "price", "1"), "unknown node"},
			{"/dashboard/max-users", form("node", "NODE", "max_users", "1"), "unknown node"},
			{"/dashboard/notices/NOTICE/redeliver", form(), "notice not found"},
		} {
			var bodies []string
			for _, node := range []string{"b1", "zz"} {
				notice := map[string]string{"b1": noticeB, "zz": "999999"}[node]
				f := url.Values{}
				for k, v := range tc.form {
					f[k] = []string{strings.ReplaceAll(v[0], "NODE", node)}
				}
				a := b.do("POST", strings.ReplaceAll(tc.path, "NOTICE", notice), f, alice)
				expect(t, fmt.Sprintf("alice's %s on %s", tc.path, node), a, 404, strings.NewReplacer("NODE", node, "NOTICE", notice).Replace(tc.want))
				msg := regexp.MustCompile(`id="message">([^<]*)<`).FindStringSubmatch(a.body)
				if msg == nil {
					t.Fatalf("alice's %s on %s: no message:\n%s", tc.path, node, a.body)
				}
				bodies = append(bodies, msg[1])
			}
			if bodies[0] != bodies[1] {
				t.Errorf("%s: bob's node answers alice\n%q\nwhere a node that does not exist answers\n%q", tc.path, bodies[0], bodies[1])
			}
		}
		expect(t, "a price that is no number", b.do("POST", "/dashboard/price", form("node", "a1", "price", "cheap"), alice), 400, "want a whole number")
		expect(t, "a negative max_users", b.do("POST", "/dashboard/max-users", form("node", "a1", "max_users", "-1"), alice), 400, "want 0 (no cap) or more")

		// Cross-site requests: without the CSRF field, with another
		// session's, from another site; none does anything.
		refusedCSRF := "This form did not come from your dashboard page"
		expect(t, "a form without its CSRF field", b.do("POST", "/dashboard/price", url.Values{"node": {"a1"}, "price": {"1"}}, alice), 403, refusedCSRF)
		expect(t, "a form with bob's CSRF field", b.do("POST", "/dashboard/price", url.Values{"node": {"a1"}, "price": {"1"}, "csrf": {csrfB}}, alice), 403, refusedCSRF)
		expect(t, "a cross-site form", b.do("POST", "/dashboard/price", form("node", "a1", "price", "1"), alice, "Sec-Fetch-Site", "cross-site"), 403, "came from another site")
		expect(t, "a form from another origin", b.do("POST", "/dashboard/max-users", form("node", "a1", "max_users", "1"), alice, "Sec-Fetch-Site", "", "Origin", "http://127.0.0.1:1"), 403, "came from another site")
		expect(t, "a cross-site logout", b.do("POST", "/logout", form(), alice, "Sec-Fetch-Site", "cross-site"), 403, "came from another site")
		expect(t, "her page after them", b.do("GET", "/", nil, alice), 200, `value="120"`, `value="40"`)

		// A forged cookie; a form without a session.
		forged := strings.Repeat("ab", 32)
		expect(t, "a forged cookie", b.do("GET", "/", nil, forged), 401, "This session is not known")
		expect(t, "a form with a forged cookie", b.do("POST", "/dashboard/price", form("node", "a1", "price", "1"), forged), 401, "This session is not known")
		expect(t, "a form without a session", b.do("POST", "/dashboard/price", form("node", "a1", "price", "1"), ""), 401, "You are not logged in")

		// Logging out ends the session, and only that one.
		expect(t, "bob's logout without the CSRF field", b.do("POST", "/logout", url.Values{}, bob), 403, refusedCSRF)
		if a := b.do("POST", "/logout", url.Values{"csrf": {csrfB}}, bob); a.code != 303 || len(a.cookies) != 1 || a.cookies[0].MaxAge >= 0 {
			t.Errorf("bob's logout: %d %v", a.code, a.cookies)
		}
		expect(t, "bob's cookie after his logout", b.do("GET", "/", nil, bob), 401, "This session is not known")
		expect(t, "alice's page after bob's logout", b.do("GET", "/", nil, alice), 200, `id="node-a1"`)

		// Sessions expire.
		c.Add(api.SessionLifetime - time.Second)
		expect(t, "alice's page a second before her session ends", b.do("GET", "/", nil, alice), 200, `id="node-a1"`)
		c.Add(time.Second)
		expect(t, "alice's page as her session ends", b.do("GET", "/", nil, alice), 401, "Your session has expired")
		expect(t, "a form in an expired session", b.do("POST", "/dashboard/price", form("node", "a1", "price", "1"), alice), 401, "This session is not known")

		log := logs.String()
		for _, want := range []string{
			`msg="dashboard: login refused" reason="unknown token"`,
			`msg="dashboard: login refused" reason="the admin's token"`,
			`msg="dashboard: login refused" reason="a node's agent token" node=a1`,
			`msg="dashboard: cross-site request refused" method=POST path=/login`,
			`msg="dashboard: logged in" operator=alice`,
			`msg="dashboard: form refused" reason="csrf token missing or wrong" operator=alice`,
			`msg="dashboard: session refused" reason=unknown`,
			`msg="dashboard: session refused" reason=expired`,
		} {
			if !strings.Contains(log, want) {
				t.Errorf("the log lacks %s:\n%s", want, log)
			}
		}
		for _, secret := range []string{"tok-wrong", "tok-alice", "tok-bob", "tok-a1", platformtest.TestToken, alice, bob, forged, csrfA} {
			if strings.Contains(log, secret) {
				t.Errorf("the log shows a token or session %q:\n%s", secret, log)
			}
		}
	})
}

// TestDashboardStates shows a node in each state the help page names,
// in its words: overloaded since when with the notice's findings,
// cooling down until when, paused, full.
func TestDashboardStates(t *testing.T) {
	eachNotifyStore(t, func(t *testing.T, open notifyOpener, _ int) {
		b, c, _, _ := dashboardPlatform(t, open)
		alice, csrf := b.login("tok-alice")
		state := func() string {
			t.Helper()
			a := b.do("GET", "/", nil, alice)
			m := regexp.MustCompile(`<p class="state (\w+)" id="state-a1">([^<]*)</p>`).FindStringSubmatch(a.body)
			if a.code != 200 || m == nil {
				t.Fatalf("alice's page: %d\n%s", a.code, a.body)
			}
			return m[1] + ": " + m[2] + "\n" + a.body
		}
		if s := state(); !strings.HasPrefix(s, "overloaded: "+fleet.StatusWordsOverloaded) || !strings.Contains(s, "Overloaded since") || !strings.Contains(s, "<li>memory at 95 %</li>") {
			t.Errorf("an overloaded node:\n%s", s)
		}
		for range 5 {
			c.Add(time.Second)
			rd, _ := json.Marshal(overload.Reading{Node: "a1", At: c.Now(), MemoryUsedPercent: 40, CPUs: 4, ConntrackMax: 262144})
			req, _ := http.NewRequest("POST", b.srv.URL+"/report", strings.NewReader(string(rd)))
			req.Header.Set("Authorization", "Bearer tok-a1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		// The overload ends with the third reading under the limits.
		until := platformtest.T0.Add(9 * time.Second).Add(routing.DefaultCoolDown).UTC().Format("2006-01-02 15:04:05 UTC")
		if s := state(); !strings.HasPrefix(s, "cooldown: "+fleet.StatusWordsCoolDown) || !strings.Contains(s, "Cool-down until "+until) || !strings.Contains(s, "overload ended") {
			t.Errorf("a node cooling down (until %s):\n%s", until, s)
		}
		c.Add(routing.DefaultCoolDown)
		if s := state(); !strings.HasPrefix(s, "ok: "+fleet.StatusWordsAdmitted) {
			t.Errorf("a node taking new connections:\n%s", s)
		}
		req, _ := http.NewRequest("POST", b.srv.URL+"/nodes/a1/pause", nil)
		req.Header.Set("Authorization", "Bearer "+platformtest.TestToken)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 204 {
			t.Fatalf("pause: %v %v", resp, err)
		}
		if s := state(); !strings.HasPrefix(s, "paused: routing paused: the node is being emptied") || !strings.Contains(s, "Routing comes back once the platform approves the node again.") ||
			!strings.Contains(s, "<td>routing paused: the node is being emptied</td>") {
			t.Errorf("a paused node, with its pause in its event list:\n%s", s)
		}
		req, _ = http.NewRequest("POST", b.srv.URL+"/nodes/a1/approve", nil)
		req.Header.Set("Authorization", "Bearer "+platformtest.TestToken)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 204 {
			t.Fatalf("approve: %v %v", resp, err)
		}
		if s := state(); !strings.Contains(s, "<td>approved again: routing comes back</td>") {
			t.Errorf("an approved node's event list:\n%s", s)
		}
		expect(t, "max_users 1", b.do("POST", "/dashboard/max-users", url.Values{"csrf": {csrf}, "node": {"a1"}, "max_users": {"1"}}, alice), 303)
		if s := state(); !strings.HasPrefix(s, "full: max_users filled: your cap, not an overload") || !strings.Contains(s, "with no notice") {
			t.Errorf("a full node:\n%s", s)
		}
	})
}

// TestDashboardOverTLS: over TLS, or behind a proxy that says it took
// the request over TLS, the session cookie is Secure and __Host-, and a
// plain-HTTP name is not taken for it.
func TestDashboardOverTLS(t *testing.T) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := apitest.NewPlatform(t, t.TempDir(), c, dashboardSeed())
	f := fleet.New(tp.Svc, nil)
	f.Owners = dashboardSeed().Operators
	srv := httptest.NewTLSServer(api.Handler(f, dashboardTokens))
	defer srv.Close()
	b := browser{t, srv}
	a := b.do("POST", "/login", url.Values{"token": {"tok-alice"}}, "")
	if a.code != 303 || len(a.cookies) != 1 {
		t.Fatalf("login over TLS: %d %v", a.code, a.cookies)
	}
	if ck := a.cookies[0]; ck.Name != "__Host-session" || !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Domain != "" {
		t.Errorf("the session cookie over TLS: %+v", ck)
	}
	// b.Do sends the value as "session", which over TLS is not the
	// session's cookie: the login form.
	expect(t, "a plain-HTTP cookie name over TLS", b.do("GET", "/", nil, a.cookies[0].Value), 200, `action="/login"`)
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	req.AddCookie(a.cookies[0])
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `id="node-a1"`) {
		t.Errorf("alice's page over TLS: %d\n%s", resp.StatusCode, body)
	}

	plain := httptest.NewServer(api.Handler(f, dashboardTokens))
	defer plain.Close()
	b = browser{t, plain}
	a = b.do("POST", "/login", url.Values{"token": {"tok-alice"}}, "", "X-Forwarded-Proto", "https")
	if a.code != 303 || len(a.cookies) != 1 || a.cookies[0].Name != "__Host-session" || !a.cookies[0].Secure {
		t.Errorf("login through a TLS proxy: %d %+v", a.code, a.cookies)
	}
}

// TestDashboardReceiver: an operator sets their own receiver from the
// dashboard and is shown its secret once, sends it a test message,
// rotates its secret, and sees it disabled after failing and enables it
// again; on both stores.
func TestDashboardReceiver(t *testing.T) {
	eachNotifyStore(t, func(t *testing.T, open notifyOpener, _ int) {
		b, c, _, np := dashboardPlatform(t, open)
		alice, csrf := b.login("tok-alice")
		form := func(kv ...string) url.Values {
			v := url.Values{"csrf": {csrf}}
			for i := 0; i+1 < len(kv); i += 2 {
				v.Set(kv[i], kv[i+1])
			}
			return v
		}
		expect(t, "alice's page before", b.do("GET", "/", nil, alice), 200, `id="your-receiver"`, "Not set", "Set your receiver")
		expect(t, "her receiver set", b.do("POST", "/dashboard/receiver", form("url", "http://127.0.0.1:9/first"), alice), 303)
		page := b.do("GET", "/", nil, alice)
		m := regexp.MustCompile(`shown this once \(keep it where your receiver checks signatures\): (whsec_[A-Za-z0-9+/=]+)`).FindStringSubmatch(html.UnescapeString(page.body))
		if m == nil {
			t.Fatalf("no secret shown after setting the receiver:\n%s", page.body)
		}
		secret := m[1]
		if again := b.do("GET", "/", nil, alice); strings.Contains(html.UnescapeString(again.body), secret) || strings.Contains(again.body, "whsec_") {
			t.Error("the secret is shown again")
		}
		h := newHook(t, c, secret)
		expect(t, "her receiver moved", b.do("POST", "/dashboard/receiver", form("url", h.url()), alice), 303)
		expect(t, "her page after it", b.do("GET", "/", nil, alice), 200, "its secret is the same", "Your nodes' notices go to http://127.0.0.1:", "your receiver (below)")
		expect(t, "a test message", b.do("POST", "/dashboard/receiver/test", form(), alice), 303)
		expect(t, "her page after it", b.do("GET", "/", nil, alice), 200, "your receiver took it (HTTP 200)")
		if as, _ := h.snapshot(); len(as) != 1 || !as[0].Verified || as[0].Msg.Type != fleet.TypeTest {
			t.Errorf("her receiver got %+v, want the test message, verified", as)
		}
		expect(t, "a rotation", b.do("POST", "/dashboard/receiver/rotate", form(), alice), 303)
		expect(t, "her page after it", b.do("GET", "/", nil, alice), 200, "new secret, shown this once: whsec_", "The old one signs beside it until")
		expect(t, "her page then", b.do("GET", "/", nil, alice), 200, "the secret you rotated out signs beside the new one until")
		// Disabled after failing, as the notifier records it.
		err := np.Svc.UpdateReceiver(t.Context(), "alice", func(r *store.OperatorReceiver, now time.Time) error {
			r.FailingSince, r.Disabled = now.Add(-store.FailFor), now
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		expect(t, "her page, disabled", b.do("GET", "/", nil, alice), 200, `id="receiver-state"`, "after failing for 5 days: nothing is sent to it until you enable it again", "Enable it again")
		expect(t, "enable", b.do("POST", "/dashboard/receiver/enable", form(), alice), 303)
		page = b.do("GET", "/", nil, alice)
		expect(t, "her page after it", page, 200, "Your receiver is enabled again")
		if strings.Contains(page.body, `id="receiver-state"`) {
			t.Errorf("still disabled or failing after enabling:\n%s", page.body)
		}
		// Bob's page shows none of it.
		bob, _ := b.login("tok-bob")
		expect(t, "bob's page", b.do("GET", "/", nil, bob), 200, "Not set")
	})
}
