package main

import (
	"bufio"
	"bytes"
	"context"
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

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// chromium is Debian's headless browser.
const chromium = "/usr/bin/chromium"

// artifactDir is where a test leaves files for people to look at:
// $TEST_ARTIFACTS/<test> when set (CI keeps it), else go test's own
// artifact directory (kept with -artifacts).
func artifactDir(t *testing.T) string {
	t.Helper()
	if root := os.Getenv("TEST_ARTIFACTS"); root != "" {
		dir := filepath.Join(root, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.ArtifactDir()
}

// devtools drives a headless chromium through the DevTools protocol on
// --remote-debugging-pipe: JSON messages ending in a NUL byte, which the
// browser reads on its descriptor 3 and writes on 4. No websocket, no
// library: what a person does is done as input events (focus a field,
// type, press Enter), and the page runs no script.
type devtools struct {
	t       *testing.T
	w       *os.File
	msgs    chan cdpMessage
	next    int
	backlog []cdpMessage // events read while waiting for an answer
	session string
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// cdpTimeout bounds each wait for the browser.
const cdpTimeout = 30 * time.Second

// startBrowser starts headless chromium with a fresh profile, and a
// page of the given size to drive.
func startBrowser(t *testing.T, width, height int) *devtools {
	t.Helper()
	in, w, err := os.Pipe() // the browser reads in as its fd 3
	if err != nil {
		t.Fatal(err)
	}
	r, out, err := os.Pipe() // and writes out as its fd 4
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{in, out}
	var stderr testkit.LogBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	in.Close()
	out.Close()
	d := &devtools{t: t, w: w, msgs: make(chan cdpMessage, 64)}
	go func() {
		defer close(d.msgs)
		br := bufio.NewReaderSize(r, 1<<20)
		for {
			b, err := br.ReadBytes(0)
			if err != nil {
				return
			}
			var m cdpMessage
			if json.Unmarshal(b[:len(b)-1], &m) == nil {
				d.msgs <- m
			}
		}
	}()
	t.Cleanup(func() {
		w.Close() // the browser exits when its pipe closes
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cancel()
			<-done
		}
		cancel()
		r.Close()
		if t.Failed() {
			t.Logf("chromium's output:\n%s", stderr.String())
		}
	})
	var target struct {
		TargetID string `json:"targetId"`
	}
	d.call("Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	d.call("Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	d.session = att.SessionID
	d.call("Page.enable", nil, nil)
	d.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	return d
}

// call sends method with params to the page (to the browser before a
// page is attached) and decodes its result into result (nil: none).
func (d *devtools) call(method string, params, result any) {
	d.t.Helper()
	d.next++
	m := map[string]any{"id": d.next, "method": method}
	if params != nil {
		m["params"] = params
	}
	if d.session != "" {
		m["sessionId"] = d.session
	}
	b, _ := json.Marshal(m)
	if _, err := d.w.Write(append(b, 0)); err != nil {
		d.t.Fatalf("devtools %s: %v", method, err)
	}
	deadline := time.After(cdpTimeout)
	for {
		select {
		case msg, ok := <-d.msgs:
			if !ok {
				d.t.Fatalf("devtools %s: the browser has gone", method)
			}
			if msg.ID != d.next {
				if msg.Method != "" {
					d.backlog = append(d.backlog, msg)
				}
				continue
			}
			if msg.Error != nil {
				d.t.Fatalf("devtools %s: %d %s", method, msg.Error.Code, msg.Error.Message)
			}
			if result != nil {
				if err := json.Unmarshal(msg.Result, result); err != nil {
					d.t.Fatalf("devtools %s: %v", method, err)
				}
			}
			return
		case <-deadline:
			d.t.Fatalf("devtools %s: no answer in %v", method, cdpTimeout)
		}
	}
}

// waitLoad waits for the page's next load event (a navigation's, a
// form's answer's).
func (d *devtools) waitLoad(what string) {
	d.t.Helper()
	deadline := time.After(cdpTimeout)
	for {
		for i, m := range d.backlog {
			if m.Method == "Page.loadEventFired" {
				d.backlog = append(d.backlog[:i], d.backlog[i+1:]...)
				return
			}
		}
		select {
		case msg, ok := <-d.msgs:
			if !ok {
				d.t.Fatalf("%s: the browser has gone", what)
			}
			if msg.Method != "" {
				d.backlog = append(d.backlog, msg)
			}
		case <-deadline:
			d.t.Fatalf("%s: no page loaded in %v", what, cdpTimeout)
		}
	}
}

// navigate opens url, as typed in the address bar, and waits for it.
func (d *devtools) navigate(url string) {
	d.t.Helper()
	d.backlog = nil
	d.call("Page.navigate", map[string]any{"url": url}, nil)
	d.waitLoad("navigate to " + url)
}

// node is the DOM node selector finds in the page.
func (d *devtools) node(selector string) int {
	d.t.Helper()
	var doc struct {
		Root struct {
			NodeID int `json:"nodeId"`
		} `json:"root"`
	}
	d.call("DOM.getDocument", map[string]any{"depth": 0}, &doc)
	var q struct {
		NodeID int `json:"nodeId"`
	}
	d.call("DOM.querySelector", map[string]any{"nodeId": doc.Root.NodeID, "selector": selector}, &q)
	if q.NodeID == 0 {
		d.t.Fatalf("no %s in the page:\n%s", selector, d.html())
	}
	return q.NodeID
}

// typeIn focuses the field selector finds and types text into it.
func (d *devtools) typeIn(selector, text string) {
	d.t.Helper()
	d.call("DOM.focus", map[string]any{"nodeId": d.node(selector)}, nil)
	d.call("Input.insertText", map[string]any{"text": text}, nil)
}

// setValue makes text the value of the field selector finds, as it
// would be after the person cleared it and typed text, and focuses it.
func (d *devtools) setValue(selector, text string) {
	d.t.Helper()
	id := d.node(selector)
	d.call("DOM.setAttributeValue", map[string]any{"nodeId": id, "name": "value", "value": text}, nil)
	d.call("DOM.focus", map[string]any{"nodeId": id}, nil)
}

// enter presses Enter in the focused field, which submits its form,
// and waits for the answer's page.
func (d *devtools) enter(what string) {
	d.t.Helper()
	d.backlog = nil
	for _, typ := range []string{"keyDown", "keyUp"} {
		ev := map[string]any{"type": typ, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13}
		if typ == "keyDown" {
			ev["text"], ev["unmodifiedText"] = "\r", "\r"
		}
		d.call("Input.dispatchKeyEvent", ev, nil)
	}
	d.waitLoad(what)
}

// html is the page's DOM as HTML.
func (d *devtools) html() string {
	d.t.Helper()
	var doc struct {
		Root struct {
			NodeID int `json:"nodeId"`
		} `json:"root"`
	}
	d.call("DOM.getDocument", map[string]any{"depth": 0}, &doc)
	var out struct {
		OuterHTML string `json:"outerHTML"`
	}
	d.call("DOM.getOuterHTML", map[string]any{"nodeId": doc.Root.NodeID}, &out)
	return out.OuterHTML
}

// screenshot saves the whole page as a PNG at path.
func (d *devtools) screenshot(path string) {
	d.t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	d.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &shot)
	b, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil || len(b) < 10_000 {
		d.t.Fatalf("screenshot: %d bytes, %v", len(b), err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		d.t.Fatal(err)
	}
	d.t.Logf("screenshot: %s (%d bytes)", path, len(b))
}

// TestDashboardInBrowser runs the built platform with two operators'
// nodes, overloads one, and has a real headless chromium log its
// operator in, read the dashboard, set a price, log out, and send a
// form from another site: what the page says is checked, and each page
// is kept as a screenshot.
func TestDashboardInBrowser(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skip("skipping: needs Debian's chromium at " + chromium)
	}
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
		var ns []numberedNotice
		return json.NewDecoder(resp.Body).Decode(&ns) == nil && len(ns) == 1 && ns[0].Delivery != nil && ns[0].Delivery.Status == statusDelivered
	})

	shots := artifactDir(t)
	b := startBrowser(t, 1200, 900)
	b.navigate(base + "/")
	if page := b.html(); !strings.Contains(page, `action="/login"`) {
		t.Fatalf("the first page is not the login form:\n%s", page)
	}
	b.typeIn("#token", "not-a-token")
	b.enter("a wrong token")
	if page := b.html(); !strings.Contains(page, "This token is not known") {
		t.Errorf("a wrong token's page:\n%s", page)
	}
	b.screenshot(filepath.Join(shots, "1-wrong-token.png"))

	b.typeIn("#token", alice)
	b.enter("alice's login")
	page := b.html()
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
	b.screenshot(filepath.Join(shots, "2-dashboard.png"))

	b.setValue("#price-de-fra-1", "120")
	b.enter("alice's price form")
	if page := b.html(); !strings.Contains(page, "The price of de-fra-1 is 120 from now on.") || !strings.Contains(page, `value="120"`) {
		t.Errorf("the page after the price form:\n%s", page)
	}
	b.screenshot(filepath.Join(shots, "3-price-set.png"))

	// A page of another site (localhost is not 127.0.0.1's site) with a
	// form aimed at the dashboard: refused, nothing done.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/dashboard/price">
<input type="hidden" name="node" value="de-fra-1"><input type="hidden" name="price" value="1">
<input id="csrf" name="csrf" value="guess"><button>Win</button></form>`, base)
	}))
	defer evil.Close()
	b.navigate(strings.Replace(evil.URL, "127.0.0.1", "localhost", 1) + "/")
	b.setValue("#csrf", "guess")
	b.enter("the cross-site form")
	if page := b.html(); !strings.Contains(page, "This request came from another site: nothing was done.") {
		t.Errorf("the cross-site form's answer:\n%s", page)
	}
	b.screenshot(filepath.Join(shots, "4-cross-site-refused.png"))
	b.navigate(base + "/")
	if page := b.html(); !strings.Contains(page, `value="120"`) {
		t.Errorf("the price after the cross-site form:\n%s", page)
	}

	b.call("DOM.focus", map[string]any{"nodeId": b.node(`form[action="/logout"] button`)}, nil)
	b.enter("the logout")
	if page := b.html(); !strings.Contains(page, `action="/login"`) {
		t.Errorf("the page after logging out:\n%s", page)
	}

	log := p.Log.String()
	for _, want := range []string{`msg="dashboard: login refused" reason="unknown token"`, `msg="dashboard: logged in" operator=alice`,
		`msg="price changed" node=de-fra-1 price=120`, `msg="dashboard: cross-site request refused" method=POST path=/dashboard/price`} {
		if !strings.Contains(log, want) {
			t.Errorf("the platform's log lacks %s", want)
		}
	}
	for _, secret := range []string{"not-a-token", alice, admin, agent} {
		if strings.Contains(log, secret) {
			t.Errorf("the platform's log shows a token %q", secret)
		}
	}
	if t.Failed() {
		t.Logf("the platform's log:\n%s", log)
	}
}
