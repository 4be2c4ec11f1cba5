package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// fakeSource gives readings one second apart, with the memory figure the
// test sets. It stands in for the probe where the point is the agent's
// own logic; the binary's tests use the real probe.
type fakeSource struct {
	mu  sync.Mutex
	at  time.Time
	mem float64
	err error
}

func newFakeSource() *fakeSource {
	return &fakeSource{at: time.Date(2026, 1, 30, 6, 0, 0, 0, time.UTC), mem: 40}
}

func (f *fakeSource) Read(context.Context) (overload.Reading, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return overload.Reading{}, f.err
	}
	f.at = f.at.Add(time.Second)
	return overload.Reading{
		Version: overload.ReadingVersion, At: f.at, MemoryUsedPercent: f.mem,
		Load15: 0.5, CPUs: 2, ConntrackEntries: 10, ConntrackMax: 1000,
		Links: []overload.Link{{Name: "eth0", RxBitsPerSecond: 8e6, TxBitsPerSecond: 1e6, SpeedMbps: 1000}},
	}, nil
}

func (f *fakeSource) setMem(m float64) {
	f.mu.Lock()
	f.mem = m
	f.mu.Unlock()
}

// testLogger logs at debug level to t's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// platform is a test platform that records the readings it accepts and
// answers with the status its fail function gives.
type platform struct {
	mu   sync.Mutex
	got  []overload.Reading
	fail func(try int) int // status to answer to the try-th request (from 1), 0 = accept
	auth []string          // each request's Authorization, in order
}

func (p *platform) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.auth = append(p.auth, r.Header.Get("Authorization"))
	if p.fail != nil {
		if st := p.fail(len(p.auth)); st != 0 {
			w.WriteHeader(st)
			return
		}
	}
	var rd overload.Reading
	if err := json.Unmarshal(b, &rd); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.got = append(p.got, rd)
}

func (p *platform) readings() []overload.Reading {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]overload.Reading(nil), p.got...)
}

// steps sets src's memory figure to mem and takes n readings with a; it
// returns how many notices they produced.
func steps(t *testing.T, a *Agent, src *fakeSource, mem float64, n int) (notices int) {
	t.Helper()
	src.setMem(mem)
	for range n {
		res, err := a.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Notice != nil {
			notices++
		}
	}
	return notices
}

func TestClassify(t *testing.T) {
	tests := []struct {
		status int
		want   outcome
	}{
		{200, delivered}, {201, delivered}, {202, delivered}, {204, delivered},
		{409, refused}, {400, refused}, {413, refused}, {422, refused},
		{401, unauthorized}, {403, unauthorized}, {404, retry}, {405, retry}, {408, retry}, {429, retry},
		{500, retry}, {502, retry}, {503, retry},
		{301, redirected}, {302, redirected}, {307, redirected}, {308, redirected},
	}
	for _, tt := range tests {
		if got := classify(tt.status); got != tt.want {
			t.Errorf("classify(%d) = %d, want %d", tt.status, got, tt.want)
		}
	}
}

func TestNextBackoff(t *testing.T) {
	d := time.Duration(0)
	var got []time.Duration
	for range 6 {
		d = nextBackoff(d, time.Second, 10*time.Second)
		got = append(got, d)
	}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("back-off steps = %v, want %v seconds", got, want)
		}
	}
}

// TestReportsSurviveAnOutage: the platform answers 503 for a while; every
// reading then arrives once, in order, and the queue empties.
func TestReportsSurviveAnOutage(t *testing.T) {
	p := &platform{fail: func(try int) int {
		if try <= 6 {
			return http.StatusServiceUnavailable
		}
		return 0
	}}
	srv := httptest.NewServer(p)
	defer srv.Close()
	src := newFakeSource()
	a, err := New(Config{
		Node: "n1", Source: src, Interval: 20 * time.Millisecond, StateDir: t.TempDir(),
		ReportURL: srv.URL, Token: "s3cret", RetryMax: 50 * time.Millisecond, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	testkit.WaitFor(t, "ten readings accepted", func() bool { return len(p.readings()) >= 10 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := p.readings()
	for i := 1; i < len(got); i++ {
		if !got[i].At.After(got[i-1].At) {
			t.Fatalf("reading %d at %v is not after reading %d at %v", i, got[i].At, i-1, got[i-1].At)
		}
	}
	if !got[0].At.Equal(time.Date(2026, 1, 30, 6, 0, 1, 0, time.UTC)) {
		t.Errorf("first reading accepted is at %v, want the first one taken", got[0].At)
	}
	for _, r := range got {
		if r.Node != "n1" || r.Version != overload.ReadingVersion {
			t.Fatalf("reading node %q version %d, want n1 %d", r.Node, r.Version, overload.ReadingVersion)
		}
	}
	p.mu.Lock()
	for _, h := range p.auth {
		if h != "Bearer s3cret" {
			t.Errorf("Authorization = %q", h)
		}
	}
	p.mu.Unlock()
	if v := testCounter(t, a, "proofkit_agent_report_failures_total"); v < 6 {
		t.Errorf("report failures = %v, want at least 6", v)
	}
}

// TestRejectedReportIsDropped: a 400 drops that report and the queue moves
// on instead of sending it for ever.
func TestRejectedReportIsDropped(t *testing.T) {
	p := &platform{fail: func(try int) int {
		if try == 1 {
			return http.StatusBadRequest
		}
		return 0
	}}
	srv := httptest.NewServer(p)
	defer srv.Close()
	a, err := New(Config{Node: "n1", Source: newFakeSource(), ReportURL: srv.URL, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		if _, err := a.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	go a.rep.run(ctx)
	testkit.WaitFor(t, "queue drained", func() bool { return a.q.len() == 0 })
	if n := len(p.readings()); n != 2 {
		t.Errorf("platform accepted %d readings, want 2", n)
	}
	if v := testCounter(t, a, `proofkit_agent_reports_dropped_total{reason="rejected"}`); v != 1 {
		t.Errorf("rejected = %v, want 1", v)
	}
}

// TestRestartKeepsOverload: a new agent on the same state directory is
// still overloaded, since the same time, and sends no second notice.
func TestRestartKeepsOverload(t *testing.T) {
	dir := t.TempDir()
	src := newFakeSource()
	src.setMem(95)
	a, err := New(Config{Node: "n1", Source: src, StateDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	notices := steps(t, a, src, 95, 3)
	st := a.Status()
	if !st.Overloaded || notices != 1 {
		t.Fatalf("after 3 readings at 95 %%: overloaded %v, notices %d", st.Overloaded, notices)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	b, err := New(Config{Node: "n1", Source: src, StateDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st2 := b.Status()
	if !st2.Overloaded || !st2.Since.Equal(st.Since) || st2.Reading == nil || !st2.Reading.At.Equal(st.Reading.At) {
		t.Fatalf("restored status = %+v, want overloaded since %v", st2, st.Since)
	}
	res, err := b.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Notice != nil || res.Event != nil || !res.Overloaded {
		t.Errorf("first reading after restart: %+v, want overloaded, no event, no notice", res)
	}
	if v := testCounter(t, b, "proofkit_agent_overloaded"); v != 1 {
		t.Errorf("proofkit_agent_overloaded = %v", v)
	}
	src.setMem(40)
	for range 3 {
		if res, err = b.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if res.Overloaded || res.Event == nil || res.Event.Kind != overload.End {
		t.Errorf("after 3 calm readings: %+v, want the end event", res)
	}
	if ev := b.Events(); len(ev) != 2 {
		t.Errorf("events = %+v, want start and end", ev)
	}
}

// edited wraps write, a writer of state.json, setting key to v in what
// it wrote.
func edited(write func(t *testing.T, dir string), key string, v any) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		write(t, dir)
		path := filepath.Join(dir, stateFile)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		m[key] = v
		if b, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStateOfAnotherNodeOrBrokenStartsAfresh(t *testing.T) {
	// overloaded saves the state of node after three readings at 95 %,
	// the first a second after start.
	overloaded := func(node string, start time.Time) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			src := newFakeSource()
			src.at = start
			src.setMem(95)
			a, err := New(Config{Node: node, Source: src, StateDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				a.Step(context.Background())
			}
			a.Close()
		}
	}
	tests := []struct {
		name    string
		content func(t *testing.T, dir string) // writes state.json
		bad     bool                           // kept as state.json.bad
	}{
		{"broken json", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, stateFile), []byte("{"), 0o600)
		}, true},
		{"over the bound", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, stateFile), bytes.Repeat([]byte(" "), maxStateFile+1), 0o600)
		}, true},
		{"unknown version", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, stateFile), []byte(`{"v":7}`), 0o600)
		}, true},
		{"from the future", overloaded("n1", time.Now().Add(time.Hour)), false},
		// Valid JSON whose run, seq or at would have every reading refused.
		{"bad run", edited(overloaded("n1", newFakeSource().at), "run", "not a run id!"), true},
		{"seq at its end", edited(overloaded("n1", newFakeSource().at), "seq", uint64(1<<64-1)), true},
		{"seq without run", edited(overloaded("n1", newFakeSource().at), "run", ""), true},
		{"at from the future", edited(overloaded("n1", newFakeSource().at), "at", "9999-01-01T00:00:00Z"), false},
		{"another node", overloaded("other", newFakeSource().at), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.content(t, dir)
			src := newFakeSource()
			src.at = time.Now() // after any notice kept from a state from the future
			a, err := New(Config{Node: "n1", Source: src, StateDir: dir, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if st := a.Status(); st.Overloaded || st.Reading != nil {
				t.Errorf("status = %+v, want a fresh node", st)
			}
			_, err = os.Stat(filepath.Join(dir, stateFile+".bad"))
			if (err == nil) != tt.bad {
				t.Errorf("state.json.bad exists: %v, want %v", err == nil, tt.bad)
			}
			if _, err := a.Step(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStateFIFOStartsAfresh: a named pipe in state.json's place is set
// aside at once, never read (reading one blocks until something writes,
// and the agent never started).
func TestStateFIFOStartsAfresh(t *testing.T) {
	dir := t.TempDir()
	if err := mkfifo(filepath.Join(dir, stateFile)); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("skipping: no named pipes here")
	} else if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		a, err := New(Config{Node: "n1", Source: newFakeSource(), StateDir: dir, Logger: testLogger(t)})
		if err == nil {
			_, err = a.Step(context.Background())
			a.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("New blocked on a FIFO as state.json")
	}
	if fi, err := os.Lstat(filepath.Join(dir, stateFile+".bad")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("state.json.bad: %v, %v; want the FIFO set aside", fi, err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, stateFile)); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("state.json after a reading: %v, %v; want a regular file", fi, err)
	}
}

// TestFutureStateKeepsLastNotice: a saved state whose latest reading is
// ahead of the clock (the clock was corrected since) is set aside, but
// not its last notice: "at most one an hour" still holds after the
// restart. A notice from the future counts as sent at the restart; one
// from the past holds until an hour after it.
func TestFutureStateKeepsLastNotice(t *testing.T) {
	tests := []struct {
		name string
		// notice is when the first agent's notice goes out, from the
		// time it starts; its last reading is then two hours ahead.
		notice time.Duration
	}{
		{"notice from the future", 2 * time.Hour},
		{"notice from the past", -20 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()

			// The first agent, on a clock two hours ahead, sends a notice.
			base := time.Now()
			src := newFakeSource()
			src.at = base.Add(tt.notice).Add(-3 * time.Second) // the 3rd reading lands on base+notice
			first, err := New(Config{Node: "n1", Source: src, StateDir: dir, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			if n := steps(t, first, src, 95, 3); n != 1 {
				t.Fatalf("first agent sent %d notices, want 1", n)
			}
			src.at = base.Add(2 * time.Hour)
			steps(t, first, src, 40, 3) // ends the overload
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}

			// The clock is right again: the next agent starts afresh...
			restart := time.Now()
			src = newFakeSource()
			src.at = restart
			a, err := New(Config{Node: "n1", Source: src, StateDir: dir, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			after := time.Now()
			if st := a.Status(); st.Reading != nil || st.Overloaded {
				t.Fatalf("status after the restart = %+v, want a fresh node", st)
			}
			// ...but sends no notice until an hour after the last one,
			// or after the restart when that one is in the future.
			held := a.Status().LastNotice
			if want := base.Add(tt.notice); want.Before(restart) {
				if !held.Equal(want) {
					t.Fatalf("last notice after the restart %v, want the saved one, %v", held, want)
				}
			} else if held.Before(restart) || held.After(after) {
				t.Fatalf("last notice after the restart %v, want the restart's time (%v to %v)", held, restart, after)
			}
			if n := steps(t, a, src, 95, 3); n != 0 {
				t.Errorf("overloaded again %v after the restart: %d notices, want none within the hour of the last",
					src.at.Sub(restart), n)
			}
			if ev := a.Events(); len(ev) != 1 || ev[0].Kind != overload.Start {
				t.Errorf("events %+v, want the start (every start is listed, notice or not)", ev)
			}
			steps(t, a, src, 40, 3)
			src.at = held.Add(time.Hour).Add(-4 * time.Second)
			if n := steps(t, a, src, 95, 3); n != 0 {
				t.Errorf("overloaded again a second before the hour: %d notices, want none", n)
			}
			steps(t, a, src, 40, 3)
			if n := steps(t, a, src, 95, 3); n != 1 {
				t.Errorf("overloaded again %v after the last notice: %d notices, want 1", src.at.Sub(held), n)
			}
			if v := testCounter(t, a, "proofkit_agent_notices_total"); v != 1 {
				t.Errorf("proofkit_agent_notices_total = %v, want 1", v)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no source", Config{}, "no reading source"},
		{"state dir under a file", Config{Source: newFakeSource(), StateDir: filepath.Join(file, "state")}, "state directory"},
		{"bad limits", Config{Source: newFakeSource(), Limits: overload.Limits{Need: 9, Window: 5}}, "new agent"},
		{"negative interval", Config{Source: newFakeSource(), Interval: -time.Second}, "Config.Interval -1s: is negative"},
		{"negative queue bound", Config{Source: newFakeSource(), QueueMax: -1}, "Config.QueueMax -1: is negative"},
		{"negative retry cap", Config{Source: newFakeSource(), RetryMax: -time.Second}, "Config.RetryMax -1s: is negative"},
		{"token twice", Config{Source: newFakeSource(), Token: "a", TokenFile: file}, "both Token and TokenFile"},
		{"report URL not http", Config{Source: newFakeSource(), ReportURL: "ftp://joe:pw@x/"}, `Config.ReportURL "ftp://xxxxx@x/"`},
		{"token not ASCII", Config{Source: newFakeSource(), Token: "tok\u00e9"}, `Config.Token (not shown): byte 4 is not ASCII`},
		{"token with a space", Config{Source: newFakeSource(), Token: "a b"}, `Config.Token (not shown): white space at byte 2`},
		// Each of these was taken and sent to (a path of) a URL nobody
		// meant, or refused with "(unparsable URL)" and no reason.
		{"report URL without a scheme", Config{Source: newFakeSource(), ReportURL: "127.0.0.1:8080/r"},
			`Config.ReportURL "127.0.0.1:8080/r": first path segment in URL cannot contain colon, and no scheme; want an http:// or https:// URL`},
		{"report URL of a path only", Config{Source: newFakeSource(), ReportURL: "platform.net/r"},
			`Config.ReportURL "platform.net/r": no scheme; want an http:// or https:// URL`},
		{"report URL unparsable with a password", Config{Source: newFakeSource(), ReportURL: "joe:pw@127.0.0.1:8080/r"},
			`Config.ReportURL "(unparsable URL)": no scheme; want an http:// or https:// URL`},
		{"report URL with a fragment", Config{Source: newFakeSource(), ReportURL: "http://127.0.0.1:1/r#x"},
			`Config.ReportURL "http://127.0.0.1:1/r#x": a fragment (#x) is never sent; want the URL without it`},
		{"report URL with a trailing space", Config{Source: newFakeSource(), ReportURL: "http://127.0.0.1:1/r "},
			`Config.ReportURL "http://127.0.0.1:1/r ": white space at byte 21; want an http:// or https:// URL`},
		{"report URL not UTF-8", Config{Source: newFakeSource(), ReportURL: "http://127.0.0.1:1/\xff"},
			`Config.ReportURL "http://127.0.0.1:1/\xff": not valid UTF-8; want an http:// or https:// URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestReadingErrorIsCountedAndRunGoesOn(t *testing.T) {
	src := newFakeSource()
	src.err = errors.New("no /proc")
	a, err := New(Config{Node: "n1", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Step(context.Background()); err == nil || !strings.Contains(err.Error(), "no /proc") {
		t.Errorf("Step: %v", err)
	}
	if v := testCounter(t, a, "proofkit_agent_reading_errors_total"); v != 1 {
		t.Errorf("reading errors = %v", v)
	}
}

func TestHandler(t *testing.T) {
	src := newFakeSource()
	src.setMem(95)
	a, err := New(Config{Node: "n1", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	var st Status
	getJSON(t, srv.URL+"/status", &st)
	if st.Node != "n1" || !st.Overloaded || len(st.Findings) != 1 || st.Findings[0].Check != overload.CheckMemory ||
		st.Reading == nil || st.Reading.MemoryUsedPercent != 95 {
		t.Errorf("/status = %+v", st)
	}
	var ev []overload.Event
	getJSON(t, srv.URL+"/events", &ev)
	if len(ev) != 1 || ev[0].Kind != overload.Start {
		t.Errorf("/events = %+v", ev)
	}

	fams := scrape(t, srv.URL+"/metrics")
	for name, want := range map[string]float64{
		"proofkit_agent_overloaded":                 1,
		"proofkit_agent_readings_total":             3,
		"proofkit_agent_memory_used_ratio":          0.95,
		"proofkit_agent_load15":                     0.5,
		"proofkit_agent_nf_conntrack_entries":       10,
		"proofkit_agent_nf_conntrack_entries_limit": 1000,
	} {
		f, ok := fams[name]
		if !ok || len(f.Metric) != 1 {
			t.Errorf("metric %s missing", name)
			continue
		}
		m := f.Metric[0]
		v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		if v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	for _, name := range []string{"proofkit_agent_check_passed", "proofkit_agent_reports_queued",
		"proofkit_agent_reports_dropped_total", "proofkit_agent_report_failures_total",
		"proofkit_agent_network_receive_bytes_total", "proofkit_agent_network_speed_bytes", "proofkit_agent_build_info", "process_resident_memory_bytes"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	if n := len(fams["proofkit_agent_check_passed"].GetMetric()); n != len(overload.Checks()) {
		t.Errorf("check_passed has %d series, want one per check", n)
	}

	resp, err := http.Post(srv.URL+"/status", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /status: %s", resp.Status)
	}
}

// TestCheckMetrics: proofkit_agent_check_passed says whether a check
// passed in the latest reading, proofkit_agent_check_holding whether it
// holds (3 of the last 5): a check may pass without holding, and hold
// without passing.
func TestCheckMetrics(t *testing.T) {
	src := newFakeSource()
	a, err := New(Config{Node: "n1", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		mem             float64
		passed, holding float64 // of the memory check
	}{
		{95, 1, 0}, {40, 0, 0}, {95, 1, 0}, {95, 1, 1}, {40, 0, 1}, {40, 0, 0},
	}
	for i, s := range steps {
		src.setMem(s.mem)
		if _, err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		p := testCounter(t, a, `proofkit_agent_check_passed{check="memory"}`)
		h := testCounter(t, a, `proofkit_agent_check_holding{check="memory"}`)
		if p != s.passed || h != s.holding {
			t.Errorf("reading %d (memory %v %%): check_passed %v, check_holding %v; want %v, %v", i+1, s.mem, p, h, s.passed, s.holding)
		}
		if v := testCounter(t, a, `proofkit_agent_check_passed{check="conntrack_fill"}`); v != 0 {
			t.Errorf("reading %d: conntrack_fill passed = %v, want 0", i+1, v)
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", url, ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// testCounter reads one series from the agent's registry, by its text
// exposition name with labels.
func testCounter(t *testing.T, a *Agent, series string) float64 {
	t.Helper()
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if err := json.Unmarshal([]byte(v), &f); err != nil {
				t.Fatalf("series %s: value %q", series, v)
			}
			return f
		}
	}
	t.Fatalf("series %s not in /metrics", series)
	return 0
}
