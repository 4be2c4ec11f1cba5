package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/chromium"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// TestDashboardInBrowser runs the built platform with two operators'
// nodes, overloads one, and has a real headless chromium log its
// operator in, read the dashboard, set a price, log out, and send a
// form from another site: what the page says is checked, and each page
// is kept as a screenshot.
func TestDashboardInBrowser(t *testing.T) {
	chromium.Need(t)
	bin := platformBinary(t)
	dir := t.TempDir()
	const (
		admin = "adm-3b1f0d7c2e9a4c55b2a6"
		alice = "op-alice-8f2c61d0b7e44f3a"
		bob   = "op-bob-51c9e2a7d3f04b6e"
		agent = "node-a1-0c7e93b5a2d14f68"
	)
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokens := write("tokens", fmt.Sprintf("%s\n%s operator:alice\n%s operator:bob\n%s de-fra-1 operator:alice\n", admin, alice, bob, agent))
	start := time.Now().UTC().Add(-3 * time.Hour).Format(time.RFC3339)
	routes := write("routes.json", `{"nodes": [
  {"id": "de-fra-1", "role": "exit", "country": "DE", "price": 100, "operator": "alice"},
  {"id": "de-ber-2", "role": "entry", "country": "DE", "price": 80, "operator": "alice", "max_users": 1},
  {"id": "nl-ams-1", "role": "exit", "country": "NL", "price": 90, "operator": "bob"}],
 "routes": [
  {"id": "r-fra-1", "user": "user-7731", "key": "key-vpn", "node": "de-fra-1", "kind": "own", "start": "`+start+`", "last_traffic": "`+start+`"},
  {"id": "r-ber-1", "user": "user-7732", "key": "key-vpn", "node": "de-ber-2", "kind": "own", "start": "`+start+`", "last_traffic": "`+start+`"}]}`)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer hook.Close()
	notify := write("notify", "* "+hook.URL+"/hooks/platform whsec_"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))+"\n")
	addr := testkit.FreeAddr(t)
	p := testkit.StartProc(t, exec.Command(bin, "-listen", addr, "-token-file", tokens, "-routes", routes,
		"-notify-file", notify, "-state-dir", filepath.Join(dir, "state")), nil)
	base := "http://" + addr
	testkit.WaitFor(t, "the platform serving", func() bool { return strings.Contains(p.Log.String(), "platform serving") })

	// de-fra-1's agent reports 3 readings over 90 % memory: overloaded,
	// and its notice delivered.
	at := time.Now().Add(-time.Minute)
	for i := range 3 {
		rd, _ := json.Marshal(overload.Reading{At: at.Add(time.Duration(i) * time.Second), MemoryUsedPercent: 93, CPUs: 4, ConntrackMax: 262144})
		req, _ := http.NewRequest("POST", base+"/report", bytes.NewReader(rd))
		req.Header.Set("Authorization", "Bearer "+agent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("reading %d: %s", i, resp.Status)
		}
	}
	testkit.WaitFor(t, "the notice delivered", func() bool {
		req, _ := http.NewRequest("GET", base+"/notices", nil)
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var ns []store.NumberedNotice
		return json.NewDecoder(resp.Body).Decode(&ns) == nil && len(ns) == 1 && ns[0].Delivery != nil && ns[0].Delivery.Status == store.StatusDelivered
	})

	shots := testkit.ArtifactDir(t)
	b := chromium.Start(t, 1200, 900)
	b.Navigate(base + "/")
	if page := b.HTML(); !strings.Contains(page, `action="/login"`) {
		t.Fatalf("the first page is not the login form:\n%s", page)
	}
	b.TypeIn("#token", "not-a-token")
	b.Enter("a wrong token")
	if page := b.HTML(); !strings.Contains(page, "This token is not known") {
		t.Errorf("a wrong token's page:\n%s", page)
	}
	b.Screenshot(filepath.Join(shots, "1-wrong-token.png"))

	b.TypeIn("#token", alice)
	b.Enter("alice's login")
	page := b.HTML()
	for _, want := range []string{
		`<p class="state overloaded" id="state-de-fra-1">overloaded: new connections refused</p>`,
		"Overloaded since", "<li>memory at 93 %</li>", "overload started",
		`<p class="state full" id="state-de-ber-2">max_users filled: your cap, not an overload</p>`,
		"de-fra-1 is overloaded: memory at 93 %", "delivered", "HTTP 204", "Redeliver",
		"To " + hook.URL + " (the platform's receiver for every node)",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("alice's dashboard lacks %q", want)
		}
	}
	for _, never := range []string{"nl-ams-1", "bob", "user-7731", "key-vpn", "r-fra-1", "/hooks/platform", alice} {
		if strings.Contains(page, never) {
			t.Errorf("alice's dashboard shows %q", never)
		}
	}
	if t.Failed() {
		t.Logf("alice's dashboard:\n%s", page)
	}
	b.Screenshot(filepath.Join(shots, "2-dashboard.png"))

	b.SetValue("#price-de-fra-1", "120")
	b.Enter("alice's price form")
	if page := b.HTML(); !strings.Contains(page, "The price of de-fra-1 is 120 from now on.") || !strings.Contains(page, `value="120"`) {
		t.Errorf("the page after the price form:\n%s", page)
	}
	b.Screenshot(filepath.Join(shots, "3-price-set.png"))

	// Her own receiver: set, its secret shown once, and a test message.
	mine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer mine.Close()
	b.SetValue("#receiver-url", mine.URL+"/alice")
	b.Enter("alice's receiver form")
	if page := b.HTML(); !strings.Contains(page, "Its secret, shown this once") || !strings.Contains(page, "whsec_") {
		t.Errorf("the page after the receiver form:\n%s", page)
	}
	b.Screenshot(filepath.Join(shots, "3-receiver-set.png"))
	b.Focus(`form[action="/dashboard/receiver/test"] button`)
	b.Enter("the test message")
	if page := b.HTML(); !strings.Contains(page, "your receiver took it (HTTP 204)") || strings.Contains(page, "whsec_") {
		t.Errorf("the page after the test message:\n%s", page)
	}
	b.Screenshot(filepath.Join(shots, "3-receiver-tested.png"))

	// A page of another site (localhost is not 127.0.0.1's site) with a
	// form aimed at the dashboard: refused, nothing done.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/dashboard/price">
<input type="hidden" name="node" value="de-fra-1"><input type="hidden" name="price" value="1">
<input id="csrf" name="csrf" value="guess"><button>Win</button></form>`, base)
	}))
	defer evil.Close()
	b.Navigate(strings.Replace(evil.URL, "127.0.0.1", "localhost", 1) + "/")
	b.SetValue("#csrf", "guess")
	b.Enter("the cross-site form")
	if page := b.HTML(); !strings.Contains(page, "This request came from another site: nothing was done.") {
		t.Errorf("the cross-site form's answer:\n%s", page)
	}
	b.Screenshot(filepath.Join(shots, "4-cross-site-refused.png"))
	b.Navigate(base + "/")
	if page := b.HTML(); !strings.Contains(page, `value="120"`) {
		t.Errorf("the price after the cross-site form:\n%s", page)
	}

	b.Focus(`form[action="/logout"] button`)
	b.Enter("the logout")
	if page := b.HTML(); !strings.Contains(page, `action="/login"`) {
		t.Errorf("the page after logging out:\n%s", page)
	}

	// The platform writes its log out at least every 100 ms.
	wants := []string{`msg="dashboard: login refused" reason="unknown token"`, `msg="dashboard: logged in" operator=alice`,
		`msg="price changed" node=de-fra-1 price=120`, `msg="dashboard: cross-site request refused" method=POST path=/dashboard/price`}
	testkit.WaitFor(t, "the platform's log lines of the session", func() bool {
		log := p.Log.String()
		for _, want := range wants {
			if !strings.Contains(log, want) {
				return false
			}
		}
		return true
	})
	log := p.Log.String()
	for _, secret := range []string{"not-a-token", alice, admin, agent} {
		if strings.Contains(log, secret) {
			t.Errorf("the platform's log shows a token %q", secret)
		}
	}
	if t.Failed() {
		t.Logf("the platform's log:\n%s", log)
	}
}
