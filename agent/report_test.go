package agent

import (
	"context"
	"encoding/json"
	"fmt"
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

	"github.com/proofkit/nodekit/internal/buildinfo"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// protoPlatform is a test platform that follows the report protocol: a
// reading of the run it last saw whose seq is not above the last is a
// duplicate, acknowledged with {"duplicate": true} and not counted again.
// Before that, answer may give the try-th request (from 1) another
// answer: a status, a body and a Location.
type protoPlatform struct {
	mu       sync.Mutex
	tries    int
	answer   func(try int) (status int, body, location string) // status 0: follow the protocol
	counted  []overload.Reading
	dups     int
	agents   []string // User-Agent of each request
	lastRun  string
	lastSeq  uint64
	redirect int // requests to /elsewhere
}

func (p *protoPlatform) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.URL.Path == "/elsewhere" {
		p.redirect++
		return // 200: what a followed redirect would take as delivered
	}
	p.tries++
	p.agents = append(p.agents, r.Header.Get("User-Agent"))
	if p.answer != nil {
		if st, body, loc := p.answer(p.tries); st != 0 {
			if loc != "" {
				w.Header().Set("Location", loc)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(st)
			io.WriteString(w, body)
			return
		}
	}
	var rd overload.Reading
	if err := json.Unmarshal(b, &rd); err != nil || rd.Run == "" || rd.Seq == 0 {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error": %q, "reason": "invalid"}`, fmt.Sprint("not a v2 reading: ", err))
		return
	}
	if rd.Run == p.lastRun && rd.Seq <= p.lastSeq {
		p.dups++
		io.WriteString(w, `{"duplicate": true}`)
		return
	}
	p.lastRun, p.lastSeq = rd.Run, rd.Seq
	p.counted = append(p.counted, rd)
}

func (p *protoPlatform) readings() []overload.Reading {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]overload.Reading(nil), p.counted...)
}

// reportingAgent is an agent of a fakeSource reporting to h, with a short
// back-off, logging into log.
func reportingAgent(t *testing.T, h http.Handler, log *testkit.LogBuffer, cfg Config) (*Agent, *fakeSource) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	src := newFakeSource()
	cfg.Node, cfg.Source, cfg.ReportURL, cfg.Token = "n1", src, srv.URL+"/report", "s3cret"
	cfg.RetryMax = cmpOr(cfg.RetryMax, 20*time.Millisecond)
	cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(log, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, src
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// sendAll takes n readings and runs the reporter until the queue is empty.
func sendAll(t *testing.T, a *Agent, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range n {
		if _, err := a.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() { a.rep.run(ctx); close(done) }()
	testkit.WaitFor(t, "the queue drained", func() bool { return a.q.len() == 0 })
	cancel()
	<-done
}

// TestRedirectIsNotFollowed: a report URL that answers 301/302/307/308 is
// never followed (a POST followed as a GET would carry no report and its
// 200 would delete the report); the report stays queued, is sent again,
// and a warning names the Location without its password.
func TestRedirectIsNotFollowed(t *testing.T) {
	for _, status := range []int{301, 302, 307, 308} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			var log testkit.LogBuffer
			p := &protoPlatform{}
			a, _ := reportingAgent(t, p, &log, Config{})
			p.answer = func(try int) (int, string, string) {
				if try <= 2 {
					return status, "", "http://joe:hunter2@" + strings.TrimPrefix(a.rep.url, "http://")[:strings.Index(strings.TrimPrefix(a.rep.url, "http://"), "/")] + "/elsewhere"
				}
				return 0, "", ""
			}
			sendAll(t, a, 3)
			if got := len(p.readings()); got != 3 || p.redirect != 0 {
				t.Errorf("platform counted %d readings, redirect target asked %d times; want 3, 0", got, p.redirect)
			}
			out := log.String()
			if !strings.Contains(out, "location=http://xxxxx@127.0.0.1:") || !strings.Contains(out, "does not follow") {
				t.Errorf("no warning naming the Location (redacted):\n%s", out)
			}
			if strings.Contains(out, "hunter2") || strings.Contains(out, "joe") {
				t.Errorf("the Location's userinfo is in the log:\n%s", out)
			}
			if v := testCounter(t, a, "proofkit_agent_reports_sent_total"); v != 3 {
				t.Errorf("sent = %v, want 3", v)
			}
		})
	}
}

// TestRefusalIsDroppedAndCounted: each refusal of the protocol drops that
// report alone, is logged with its run and seq, counted by reason, and
// never counted as sent; 401 keeps it.
func TestRefusalIsDroppedAndCounted(t *testing.T) {
	tests := []struct {
		status int
		body   string
		reason string // "": not dropped
	}{
		{409, `{"error": "not newer than the last", "reason": "older"}`, "older"},
		{409, ``, "older"},
		{400, `{"error": "bad json", "reason": "invalid"}`, "invalid"},
		{422, `{"error": "no such node", "reason": "unknown_node"}`, "unknown_node"},
		{413, `{"error": "too big", "reason": "too_large"}`, "too_large"},
		{422, `{"error": "x", "reason": "made-up word"}`, "invalid"},
		{410, `gone`, "invalid"},
		{401, `{"error": "bad token", "reason": "unauthorized"}`, ""},
		{503, `busy`, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d %s", tt.status, tt.reason), func(t *testing.T) {
			var log testkit.LogBuffer
			p := &protoPlatform{answer: func(try int) (int, string, string) {
				if try == 2 {
					return tt.status, tt.body, ""
				}
				return 0, "", ""
			}}
			a, _ := reportingAgent(t, p, &log, Config{})
			sendAll(t, a, 3)
			var seqs []uint64
			for _, r := range p.readings() {
				seqs = append(seqs, r.Seq)
			}
			want := "[1 2 3]"
			if tt.reason != "" {
				want = "[1 3]"
			}
			if fmt.Sprint(seqs) != want {
				t.Errorf("platform counted seqs %v, want %s", seqs, want)
			}
			if v := testCounter(t, a, "proofkit_agent_reports_sent_total"); v != float64(len(seqs)) {
				t.Errorf("sent = %v, want %d", v, len(seqs))
			}
			if tt.status == 401 {
				if v := testCounter(t, a, `proofkit_agent_reports_refused_total{reason="unauthorized"}`); v != 1 {
					t.Errorf("refused{unauthorized} = %v, want 1 (kept, but counted)", v)
				}
			}
			if tt.reason == "" {
				return
			}
			if v := testCounter(t, a, `proofkit_agent_reports_refused_total{reason="`+tt.reason+`"}`); v != 1 {
				t.Errorf("refused{%s} = %v, want 1", tt.reason, v)
			}
			if !strings.Contains(log.String(), `msg="platform refused a report; dropped it" reason=`+tt.reason) ||
				!strings.Contains(log.String(), "seq=2") {
				t.Errorf("no line naming the refusal, its reason and seq:\n%s", log.String())
			}
		})
	}
}

// TestDuplicateIsDelivered: an answer saying the platform already had the
// report (a retry after a lost answer) takes it off the queue as
// delivered, counted under duplicate.
func TestDuplicateIsDelivered(t *testing.T) {
	var log testkit.LogBuffer
	p := &protoPlatform{answer: func(try int) (int, string, string) {
		if try == 1 {
			return 200, `{"duplicate": true}`, ""
		}
		if try == 2 {
			return 409, `{"error": "counted already", "reason": "duplicate"}`, ""
		}
		return 0, "", ""
	}}
	a, _ := reportingAgent(t, p, &log, Config{})
	sendAll(t, a, 3)
	if n := len(p.readings()); n != 1 {
		t.Errorf("platform counted %d, want 1 (the other two answered as duplicates)", n)
	}
	if v := testCounter(t, a, "proofkit_agent_reports_duplicate_total"); v != 2 {
		t.Errorf("duplicate = %v, want 2", v)
	}
	if v := testCounter(t, a, "proofkit_agent_reports_sent_total"); v != 3 {
		t.Errorf("sent = %v, want 3", v)
	}
}

// TestRecoveryIsLogged: after failures, one line says that delivery
// recovered, after how long, and how many queued reports went.
func TestRecoveryIsLogged(t *testing.T) {
	var log testkit.LogBuffer
	p := &protoPlatform{answer: func(try int) (int, string, string) {
		if try <= 4 {
			return 503, "", ""
		}
		return 0, "", ""
	}}
	a, _ := reportingAgent(t, p, &log, Config{})
	sendAll(t, a, 7)
	if n := strings.Count(log.String(), "reports delivered again after "); n != 1 {
		t.Fatalf("%d recovery lines, want 1:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "; 7 queued reports sent") {
		t.Errorf("recovery line does not say 7 reports were sent:\n%s", log.String())
	}
}

// TestUserAgent: every report carries buildinfo's User-Agent.
func TestUserAgent(t *testing.T) {
	var log testkit.LogBuffer
	p := &protoPlatform{}
	a, _ := reportingAgent(t, p, &log, Config{})
	sendAll(t, a, 2)
	want := buildinfo.Read().UserAgent("proofkit-agent")
	for _, ua := range p.agents {
		if ua != want {
			t.Errorf("User-Agent %q, want %q", ua, want)
		}
	}
}

// TestClockSteps: the wall clock stepped back an hour, then forward, then
// the agent restarted: at never runs backwards, a forward step is taken
// as it comes, seq goes on across the restart in the same run, and the
// platform counts every reading.
func TestClockSteps(t *testing.T) {
	dir := t.TempDir()
	var log testkit.LogBuffer
	p := &protoPlatform{}
	a, src := reportingAgent(t, p, &log, Config{StateDir: dir})
	sendAll(t, a, 2)
	src.mu.Lock()
	src.at = src.at.Add(-time.Hour)
	src.mu.Unlock()
	sendAll(t, a, 2)
	src.mu.Lock()
	src.at = src.at.Add(3 * time.Hour) // two hours ahead of the first reading
	src.mu.Unlock()
	sendAll(t, a, 1)
	src.mu.Lock()
	src.at = src.at.Add(-30 * time.Second) // back, then a restart
	back := src.at
	src.mu.Unlock()
	a.Close()

	b, err := New(Config{Node: "n1", Source: src, StateDir: dir, ReportURL: a.rep.url, Token: "s3cret",
		RetryMax: 20 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sendAll(t, b, 2)

	got := p.readings()
	if len(got) != 7 {
		t.Fatalf("platform counted %d readings, want 7", len(got))
	}
	for i, r := range got {
		if r.Run != got[0].Run || r.Seq != uint64(i+1) {
			t.Errorf("reading %d: run %s seq %d, want run %s seq %d", i, r.Run, r.Seq, got[0].Run, i+1)
		}
		if i > 0 && !r.At.After(got[i-1].At) {
			t.Errorf("reading %d at %v is not after the one before, at %v", i, r.At, got[i-1].At)
		}
	}
	if d := got[4].At.Sub(got[3].At); d < 100*time.Minute {
		t.Errorf("the forward step gave %v between readings, want it taken as it came (about two hours)", d)
	}
	if d := got[5].At.Sub(got[4].At); d < time.Second || !got[5].At.After(back) {
		t.Errorf("after a step back and a restart: %v after the last at, want at least the second of a restart", d)
	}
}

func TestNextAt(t *testing.T) {
	base := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		wall    time.Time
		last    time.Time
		elapsed time.Duration
		want    time.Time
	}{
		{"first of a run", base, time.Time{}, 0, base},
		{"wall ahead", base.Add(30 * time.Second), base, 30 * time.Second, base.Add(30 * time.Second)},
		{"stepped back an hour", base.Add(-time.Hour), base, 30 * time.Second, base.Add(30 * time.Second)},
		{"stepped forward", base.Add(time.Hour), base, 30 * time.Second, base.Add(time.Hour)},
		{"restart after a step back", base.Add(-time.Hour), base, time.Second, base.Add(time.Second)},
		{"no time elapsed", base, base, 0, base.Add(time.Nanosecond)},
	}
	for _, tt := range tests {
		if got := nextAt(tt.wall, tt.last, tt.elapsed); !got.Equal(tt.want) {
			t.Errorf("%s: nextAt = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestStepReturnsWhenSourceBlocks: a source that ignores its context does
// not hold Step (and so Run, and SIGTERM) past the context's end.
func TestStepReturnsWhenSourceBlocks(t *testing.T) {
	src := blockingSource{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	defer close(src.block)
	a, err := New(Config{Node: "n1", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-src.entered:
	case <-time.After(testkit.Timeout):
		t.Fatal("Run never read the source")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("Run did not return within a second of its context's end while the source blocked")
	}
}

// blockingSource blocks every Read until block is closed, whatever its
// context; entered gets a value when a Read has begun.
type blockingSource struct{ block, entered chan struct{} }

func (b blockingSource) Read(context.Context) (overload.Reading, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.block
	return overload.Reading{}, context.Canceled
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"https://platform.example/api", "https://platform.example/api"},
		{"https://joe:hunter2@platform.example/api?x=1", "https://xxxxx@platform.example/api?x=1"},
		{"https://tokenonly@platform.example/", "https://xxxxx@platform.example/"},
		{"http://a b:c@%zz/", "(unparsable URL)"},
	}
	for _, tt := range tests {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestCredentialWarnings: a token file others can read, userinfo in the
// report URL and a token over plain http to a host that is not loopback
// each give a warning at New; the userinfo never reaches the log.
func TestCredentialWarnings(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	closed := filepath.Join(dir, "closed")
	writeToken(t, open, "tok-A")
	writeToken(t, closed, "tok-A")
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, url, file string
		want            []string
	}{
		{"quiet", "https://platform.example/r", closed, nil},
		{"loopback http", "http://127.0.0.1:1/r", closed, nil},
		{"localhost http", "http://localhost:1/r", closed, nil},
		{"readable token file", "https://platform.example/r", open, []string{"can be read by other users", "mode=-rw-r--r--"}},
		{"plain http", "http://platform.example/r", closed, []string{"plain http"}},
		{"userinfo", "https://joe:hunter2@platform.example/r", closed, []string{"user name or password", "xxxxx@platform.example"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log testkit.LogBuffer
			a, err := New(Config{Node: "n1", Source: newFakeSource(), ReportURL: tt.url, TokenFile: tt.file,
				Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if err != nil {
				t.Fatal(err)
			}
			a.Close()
			out := log.String()
			if len(tt.want) == 0 && strings.Contains(out, "level=WARN") {
				t.Errorf("unexpected warning:\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("log lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "hunter2") || strings.Contains(out, "tok-A") {
				t.Errorf("a credential is in the log:\n%s", out)
			}
		})
	}
}

// TestBadQueueLineIsNamed: a line of the queue file that is not one
// report is skipped alone, with a warning naming its byte offset, and the
// reports after it are sent.
func TestBadQueueLineIsNamed(t *testing.T) {
	dir := t.TempDir()
	old, _ := newFakeSource().Read(context.Background())
	old.At, old.Run, old.Seq = old.At.Add(-time.Hour), "r0", 1
	good, _ := json.Marshal(old)
	bad := `{"v":2,"node":"n1","at":"2026-01-30T05:`
	old.Seq, old.At = 2, old.At.Add(time.Second)
	next, _ := json.Marshal(old)
	file := string(good) + "\n" + bad + "\n" + string(next) + "\n"
	if err := os.WriteFile(filepath.Join(dir, queueFile), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	var log testkit.LogBuffer
	p := &protoPlatform{}
	a, _ := reportingAgent(t, p, &log, Config{StateDir: dir})
	if !strings.Contains(log.String(), fmt.Sprintf("offset=%d length=%d", len(good)+1, len(bad))) {
		t.Errorf("no warning naming the bad line's offset:\n%s", log.String())
	}
	sendAll(t, a, 1)
	var got []string
	for _, r := range p.readings() {
		got = append(got, fmt.Sprintf("%s/%d", r.Run[:2], r.Seq))
	}
	if len(got) != 3 || got[0] != "r0/1" || got[1] != "r0/2" {
		t.Errorf("platform counted %v, want r0/1, r0/2 and the new reading", got)
	}
	if v := testCounter(t, a, `proofkit_agent_reports_dropped_total{reason="torn"}`); v != 1 {
		t.Errorf("dropped{torn} = %v, want 1", v)
	}
}
