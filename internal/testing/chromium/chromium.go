// Package chromium runs Debian's headless chromium for tests: once on a
// URL (a DOM dump, a screenshot), or as a Page driven over the DevTools
// protocol the way a person uses it.
package chromium

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// Path is Debian's headless browser.
const Path = "/usr/bin/chromium"

// Need skips t without chromium at Path.
func Need(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(Path); err != nil {
		t.Skip("skipping: needs Debian's chromium at " + Path)
	}
}

// flags are every run's: headless, with a fresh profile added, and
// nothing fetched from the network but the test's pages.
var flags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync"}

// Run runs headless chromium on url with extra flags (--dump-dom,
// --screenshot=…), within a minute, and returns its standard output.
func Run(t testing.TB, url string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append(append(append([]string{}, flags...), "--user-data-dir="+t.TempDir()), extra...)
	cmd := exec.CommandContext(ctx, Path, append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(extra, " "), err, stderr.String())
	}
	return string(out)
}

// Page is one page of a headless chromium, driven through the DevTools
// protocol on --remote-debugging-pipe: JSON messages ending in a NUL
// byte, which the browser reads on its descriptor 3 and writes on 4. No
// websocket, no library. A person's acts are input events (focus a
// field, type, press Enter), so a page under test needs no script.
type Page struct {
	t       testing.TB
	w       *os.File
	msgs    chan message
	next    int
	backlog []message // events read while waiting for an answer
	session string
}

type message struct {
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

// Timeout bounds each wait for the browser.
const Timeout = 30 * time.Second

// Start starts headless chromium with a fresh profile and returns a
// blank page of width × height CSS pixels to drive. The browser is
// stopped when t ends; its output is logged if t failed.
func Start(t testing.TB, width, height int) *Page {
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
	args := append(append([]string{}, flags...), "--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	cmd := exec.CommandContext(ctx, Path, args...)
	cmd.ExtraFiles = []*os.File{in, out}
	var stderr testkit.LogBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	in.Close()
	out.Close()
	p := &Page{t: t, w: w, msgs: make(chan message, 64)}
	go func() {
		defer close(p.msgs)
		br := bufio.NewReaderSize(r, 1<<20)
		for {
			b, err := br.ReadBytes(0)
			if err != nil {
				return
			}
			var m message
			if json.Unmarshal(b[:len(b)-1], &m) == nil {
				p.msgs <- m
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
	p.Call("Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	p.Call("Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	p.session = att.SessionID
	p.Call("Page.enable", nil, nil)
	p.Call("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	return p
}

// Call sends the DevTools command method with params to the page and
// decodes its result into result (nil: none).
func (p *Page) Call(method string, params, result any) {
	p.t.Helper()
	p.next++
	m := map[string]any{"id": p.next, "method": method}
	if params != nil {
		m["params"] = params
	}
	if p.session != "" {
		m["sessionId"] = p.session
	}
	b, _ := json.Marshal(m)
	if _, err := p.w.Write(append(b, 0)); err != nil {
		p.t.Fatalf("devtools %s: %v", method, err)
	}
	deadline := time.After(Timeout)
	for {
		select {
		case msg, ok := <-p.msgs:
			if !ok {
				p.t.Fatalf("devtools %s: the browser has gone", method)
			}
			if msg.ID != p.next {
				if msg.Method != "" {
					p.backlog = append(p.backlog, msg)
				}
				continue
			}
			if msg.Error != nil {
				p.t.Fatalf("devtools %s: %d %s", method, msg.Error.Code, msg.Error.Message)
			}
			if result != nil {
				if err := json.Unmarshal(msg.Result, result); err != nil {
					p.t.Fatalf("devtools %s: %v", method, err)
				}
			}
			return
		case <-deadline:
			p.t.Fatalf("devtools %s: no answer in %v", method, Timeout)
		}
	}
}

// waitLoad waits for the page's next load event (a navigation's, a
// form's answer's).
func (p *Page) waitLoad(what string) {
	p.t.Helper()
	deadline := time.After(Timeout)
	for {
		for i, m := range p.backlog {
			if m.Method == "Page.loadEventFired" {
				p.backlog = append(p.backlog[:i], p.backlog[i+1:]...)
				return
			}
		}
		select {
		case msg, ok := <-p.msgs:
			if !ok {
				p.t.Fatalf("%s: the browser has gone", what)
			}
			if msg.Method != "" {
				p.backlog = append(p.backlog, msg)
			}
		case <-deadline:
			p.t.Fatalf("%s: no page loaded in %v", what, Timeout)
		}
	}
}

// Navigate opens url, as typed in the address bar, and waits for it to
// load.
func (p *Page) Navigate(url string) {
	p.t.Helper()
	p.backlog = nil
	p.Call("Page.navigate", map[string]any{"url": url}, nil)
	p.waitLoad("navigate to " + url)
}

// root is the document's node.
func (p *Page) root() int {
	p.t.Helper()
	var doc struct {
		Root struct {
			NodeID int `json:"nodeId"`
		} `json:"root"`
	}
	p.Call("DOM.getDocument", map[string]any{"depth": 0}, &doc)
	return doc.Root.NodeID
}

// node is the DOM node selector finds in the page.
func (p *Page) node(selector string) int {
	p.t.Helper()
	var q struct {
		NodeID int `json:"nodeId"`
	}
	p.Call("DOM.querySelector", map[string]any{"nodeId": p.root(), "selector": selector}, &q)
	if q.NodeID == 0 {
		p.t.Fatalf("no %s in the page:\n%s", selector, p.HTML())
	}
	return q.NodeID
}

// Focus focuses the element selector finds: a field, a button.
func (p *Page) Focus(selector string) {
	p.t.Helper()
	p.Call("DOM.focus", map[string]any{"nodeId": p.node(selector)}, nil)
}

// TypeIn focuses the field selector finds and types text into it.
func (p *Page) TypeIn(selector, text string) {
	p.t.Helper()
	p.Focus(selector)
	p.Call("Input.insertText", map[string]any{"text": text}, nil)
}

// SetValue makes text the value of the untouched field selector finds,
// as it would be after the person cleared it and typed text, and
// focuses it.
func (p *Page) SetValue(selector, text string) {
	p.t.Helper()
	id := p.node(selector)
	p.Call("DOM.setAttributeValue", map[string]any{"nodeId": id, "name": "value", "value": text}, nil)
	p.Call("DOM.focus", map[string]any{"nodeId": id}, nil)
}

// Enter presses Enter on the focused field or button, which submits
// its form, and waits for the answer's page; what names the act in a
// failure.
func (p *Page) Enter(what string) {
	p.t.Helper()
	p.backlog = nil
	for _, typ := range []string{"keyDown", "keyUp"} {
		ev := map[string]any{"type": typ, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13}
		if typ == "keyDown" {
			ev["text"], ev["unmodifiedText"] = "\r", "\r"
		}
		p.Call("Input.dispatchKeyEvent", ev, nil)
	}
	p.waitLoad(what)
}

// HTML is the page's DOM as HTML.
func (p *Page) HTML() string {
	p.t.Helper()
	var out struct {
		OuterHTML string `json:"outerHTML"`
	}
	p.Call("DOM.getOuterHTML", map[string]any{"nodeId": p.root()}, &out)
	return out.OuterHTML
}

// Screenshot saves the whole page, beyond the window too, as a PNG at
// path.
func (p *Page) Screenshot(path string) {
	p.t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	p.Call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &shot)
	b, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil || !strings.HasPrefix(string(b), "\x89PNG\r\n\x1a\n") {
		p.t.Fatalf("screenshot: %d bytes, not a PNG: %v", len(b), err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s (%d bytes)", path, len(b))
}
