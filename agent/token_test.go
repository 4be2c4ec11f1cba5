package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

func writeToken(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newTokenAgent serves h as the platform and makes an agent of node n1
// that reports to it with a token file holding tok-A; cfg gives the rest
// (Interval, RetryMax, Logger, StateDir). It returns the agent and the
// token file's path; both go when the test ends.
func newTokenAgent(t *testing.T, h http.Handler, cfg Config) (*Agent, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "token")
	writeToken(t, file, "tok-A\n")
	cfg.Node, cfg.Source, cfg.ReportURL, cfg.TokenFile = "n1", newFakeSource(), srv.URL, file
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, file
}

// reportOne takes one reading and starts a's reporter, which runs until
// the test ends; it returns the context both run under.
func reportOne(t *testing.T, a *Agent) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	if _, err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	go a.rep.run(ctx)
	return ctx
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string // "" with missing: no file at all
		missing bool
		want    string // the token, or the error's end
		wantErr bool
	}{
		{name: "one line", content: "tok-A\n", want: "tok-A"},
		{name: "white space around", content: "  tok-A \r\n\n", want: "tok-A"},
		{name: "missing", missing: true, want: "no such file or directory", wantErr: true},
		{name: "empty", content: "", want: "empty", wantErr: true},
		{name: "blank", content: " \n\t\n", want: "empty", wantErr: true},
		{name: "two lines", content: "tok-A\ntok-B\n", want: "more than one line", wantErr: true},
		{name: "carriage return inside", content: "tok-A\rtok-B", want: "more than one line", wantErr: true},
		{name: "CRLF at the end", content: "tok-A\r\n", want: "tok-A"},
		// Each of these went out in every report's Authorization header:
		// the platform never matched it (or Go refused to send it), and
		// the reports waited for ever.
		{name: "space inside", content: "tok-A tok-B\n", want: "white space at byte 6; want the token alone, in printable ASCII", wantErr: true},
		{name: "scheme given", content: "Bearer tok-A\n", want: `starts with "Bearer "; want the token alone (the agent adds the scheme)`, wantErr: true},
		{name: "NUL inside", content: "tok-A\x00\n", want: "a control character at byte 6; want the token alone, in printable ASCII", wantErr: true},
		{name: "UTF-16", content: "\xff\xfet\x00o\x00k\x00", want: "byte 1 is not ASCII (another encoding than UTF-8, or a byte-order mark?); want the token alone, in printable ASCII", wantErr: true},
		{name: "byte-order mark", content: "\xef\xbb\xbftok-A\n", want: "byte 1 is not ASCII (another encoding than UTF-8, or a byte-order mark?); want the token alone, in printable ASCII", wantErr: true},
		{name: "not UTF-8", content: "tok-A\xff\n", want: "byte 6 is not ASCII (another encoding than UTF-8, or a byte-order mark?); want the token alone, in printable ASCII", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			if !tt.missing {
				writeToken(t, path, tt.content)
			}
			got, err := readTokenFile(path)
			if !tt.wantErr {
				if err != nil || got != tt.want {
					t.Fatalf("readTokenFile = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("readTokenFile = %q, want an error saying %q", got, tt.want)
			}
			if msg := err.Error(); msg != "token file "+path+": "+tt.want {
				t.Errorf("error %q, want %q", msg, "token file "+path+": "+tt.want)
			}
			if strings.Contains(err.Error(), "tok-") {
				t.Errorf("error %q carries the token", err)
			}
			if tt.missing && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("error %v is not fs.ErrNotExist", err)
			}
		})
	}
}

func TestNewTokenFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	writeToken(t, good, "tok-A\n")
	empty := filepath.Join(dir, "empty")
	writeToken(t, empty, "")
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"both", Config{Token: "tok-A", TokenFile: good}, "new agent: both Token and TokenFile given; give one"},
		{"empty", Config{TokenFile: empty}, "new agent: token file " + empty + ": empty"},
		{"missing", Config{TokenFile: filepath.Join(dir, "nope")}, "new agent: token file " + filepath.Join(dir, "nope") + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			tt.cfg.Source, tt.cfg.StateDir = newFakeSource(), state
			a, err := New(tt.cfg)
			if err == nil {
				a.Close()
				t.Fatalf("New succeeded, want %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("New: %q, want %q", err, tt.want)
			}
			if _, err := os.Stat(state); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a refused New left its state directory (%v)", err)
			}
		})
	}

	a, err := New(Config{Source: newFakeSource(), Token: "tok-A"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ReloadToken(); err == nil || !strings.Contains(err.Error(), "no token file") {
		t.Errorf("ReloadToken with a fixed token: %v, want an error saying there is no token file", err)
	}
	if got := a.tok.get(); got != "tok-A" {
		t.Errorf("token after a refused reload = %q, want tok-A", got)
	}
}

// tokenPlatform accepts reports carrying the one token it takes now and
// answers 401 to any other; it records every attempt.
type tokenPlatform struct {
	mu     sync.Mutex
	accept string // "Bearer …"
	tries  []attempt
}

type attempt struct {
	auth   string
	at     time.Time
	status int
}

func (p *tokenPlatform) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var rd overload.Reading
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &rd); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := http.StatusAccepted
	if r.Header.Get("Authorization") != p.accept {
		st = http.StatusUnauthorized
	}
	p.tries = append(p.tries, attempt{auth: r.Header.Get("Authorization"), at: rd.At, status: st})
	w.WriteHeader(st)
}

func (p *tokenPlatform) take(token string) {
	p.mu.Lock()
	p.accept = "Bearer " + token
	p.mu.Unlock()
}

func (p *tokenPlatform) attempts() []attempt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]attempt(nil), p.tries...)
}

// accepted returns the readings accepted with the token, in order.
func (p *tokenPlatform) accepted(token string) []time.Time {
	var out []time.Time
	for _, a := range p.attempts() {
		if a.status == http.StatusAccepted && (token == "" || a.auth == "Bearer "+token) {
			out = append(out, a.at)
		}
	}
	return out
}

// TestTokenRotation: the platform takes token A, then, once the operators
// wrote B to the token file, only B. The first report refused with A makes
// the agent read the file again; that same report goes again, at once,
// with B, and every reading reaches the platform once, in order.
func TestTokenRotation(t *testing.T) {
	plat := &tokenPlatform{accept: "Bearer tok-A"}
	var log testkit.LogBuffer
	a, file := newTokenAgent(t, plat, Config{
		Interval: 20 * time.Millisecond, StateDir: t.TempDir(), RetryMax: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	testkit.WaitFor(t, "three readings accepted with A", func() bool { return len(plat.accepted("tok-A")) >= 3 })
	writeToken(t, file, "tok-B\n")
	plat.take("tok-B")
	testkit.WaitFor(t, "three readings accepted with B", func() bool { return len(plat.accepted("tok-B")) >= 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.Logf("agent log:\n%s", log.String())
	}

	tries := plat.attempts()
	refused := -1
	for i, at := range tries {
		if at.status == http.StatusUnauthorized {
			if refused >= 0 {
				t.Errorf("attempt %d refused too (%s), want only the first with A refused", i, at.auth)
				continue
			}
			refused = i
		}
	}
	if refused < 0 || refused+1 >= len(tries) {
		t.Fatalf("attempts %+v: want one refused, then more", tries)
	}
	if next := tries[refused+1]; next.auth != "Bearer tok-B" || !next.at.Equal(tries[refused].at) || next.status != http.StatusAccepted {
		t.Errorf("after the refusal of the report at %v came %+v; want that report again, with B, accepted", tries[refused].at, next)
	}
	for i, at := range tries {
		want := "Bearer tok-A"
		if i > refused {
			want = "Bearer tok-B"
		}
		if at.auth != want {
			t.Errorf("attempt %d carried %q, want %q", i, at.auth, want)
		}
	}
	got := plat.accepted("")
	start := time.Date(2026, 1, 30, 6, 0, 1, 0, time.UTC)
	for i, at := range got {
		if want := start.Add(time.Duration(i) * time.Second); !at.Equal(want) {
			t.Fatalf("accepted reading %d is at %v, want %v (lost, duplicated or out of order)", i, at, want)
		}
	}
	if n := strings.Count(log.String(), "report not delivered; will retry"); n != 0 {
		t.Errorf("logged %d waits before a retry, want none: the refused report goes again at once with B", n)
	}
	if n := strings.Count(log.String(), "read a new one from the token file"); n != 1 {
		t.Errorf("logged the new token %d times, want once", n)
	}
	if strings.Contains(log.String(), "tok-") {
		t.Errorf("the log carries the token:\n%s", log.String())
	}
}

// TestTokenBadReread: the token file is broken after the agent read it;
// refusals make the agent read it again, once an interval: it keeps token
// A, logs one warning naming the file and the reason, and delivers its
// reports with A once the platform takes them. ReloadToken fails the same
// way and keeps A too.
func TestTokenBadReread(t *testing.T) {
	tests := []struct {
		name   string
		spoil  func(path string) error
		reason string
	}{
		{"empty", func(p string) error { return os.WriteFile(p, nil, 0o600) }, "empty"},
		{"missing", os.Remove, "no such file or directory"},
		{"two lines", func(p string) error { return os.WriteFile(p, []byte("tok-B\ntok-C\n"), 0o600) }, "more than one line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plat := &tokenPlatform{accept: "Bearer none yet"}
			var log testkit.LogBuffer
			a, file := newTokenAgent(t, plat, Config{
				Interval: time.Hour, RetryMax: 5 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(&log, nil)),
			})
			if err := tt.spoil(file); err != nil {
				t.Fatal(err)
			}
			ctx := reportOne(t, a)
			testkit.WaitFor(t, "five refusals", func() bool { return len(plat.attempts()) >= 5 })
			plat.take("tok-A")
			testkit.WaitFor(t, "the reading accepted with A", func() bool { return len(plat.accepted("tok-A")) == 1 })

			if _, err := a.ReloadToken(); err == nil || err.Error() != "reload token: token file "+file+": "+tt.reason {
				t.Errorf("ReloadToken: %v, want %q", err, "reload token: token file "+file+": "+tt.reason)
			}
			if _, err := a.Step(ctx); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, "the second reading accepted with A", func() bool { return len(plat.accepted("tok-A")) == 2 })

			for i, at := range plat.attempts() {
				if at.auth != "Bearer tok-A" {
					t.Errorf("attempt %d carried %q, want A kept", i, at.auth)
				}
			}
			out := log.String()
			want := "could not read the token file again, keeping the current token"
			if n := strings.Count(out, want); n != 1 {
				t.Errorf("logged %q %d times, want once (at most one read an interval):\n%s", want, n, out)
			}
			for line := range strings.SplitSeq(out, "\n") {
				if strings.Contains(line, want) && (!strings.Contains(line, "level=WARN") ||
					!strings.Contains(line, file) || !strings.Contains(line, tt.reason)) {
					t.Errorf("warning %q does not name the file %s and the reason %q", line, file, tt.reason)
				}
			}
			if strings.Contains(out, "tok-") {
				t.Errorf("the log carries a token:\n%s", out)
			}
		})
	}
}

// TestReloadToken: while the platform refuses token A, the agent reads its
// token file once an interval, not at every refusal; ReloadToken reads it
// at once, and the waiting report goes with B.
func TestReloadToken(t *testing.T) {
	plat := &tokenPlatform{accept: "Bearer tok-B"}
	var log testkit.LogBuffer
	a, file := newTokenAgent(t, plat, Config{
		Interval: time.Hour, RetryMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
	})
	reportOne(t, a)
	testkit.WaitFor(t, "three refusals", func() bool { return len(plat.attempts()) >= 3 })
	writeToken(t, file, "tok-B\n")
	n := len(plat.attempts())
	testkit.WaitFor(t, "three more refusals", func() bool { return len(plat.attempts()) >= n+3 })
	if got := plat.accepted(""); len(got) != 0 {
		t.Fatalf("accepted %v before ReloadToken: the file was read again within the interval", got)
	}
	if changed, err := a.ReloadToken(); err != nil || !changed {
		t.Fatalf("ReloadToken = %v, %v; want changed", changed, err)
	}
	if changed, err := a.ReloadToken(); err != nil || changed {
		t.Fatalf("ReloadToken again = %v, %v; want unchanged", changed, err)
	}
	testkit.WaitFor(t, "the reading accepted with B", func() bool { return len(plat.accepted("tok-B")) == 1 })
	if got := plat.accepted("tok-B"); !got[0].Equal(time.Date(2026, 1, 30, 6, 0, 1, 0, time.UTC)) {
		t.Errorf("accepted the reading at %v, want the one refused", got[0])
	}
	want := "the platform refused the token, and the token file still holds it"
	if c := strings.Count(log.String(), want); c != 1 {
		t.Errorf("logged %q %d times, want once:\n%s", want, c, log.String())
	}
}

// TestReloadTokenEndsTheWait: a report refused with a Retry-After of ten
// minutes goes again as soon as ReloadToken sets a new token.
func TestReloadTokenEndsTheWait(t *testing.T) {
	var mu sync.Mutex
	var got []string
	a, file := newTokenAgent(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") != "Bearer tok-B" {
			w.Header().Set("Retry-After", "600")
			w.WriteHeader(http.StatusForbidden)
		}
	}), Config{Interval: time.Hour, Logger: testLogger(t)})
	reportOne(t, a)
	attempts := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
	testkit.WaitFor(t, "a refusal", func() bool { return len(attempts()) == 1 })
	writeToken(t, file, "tok-B\n")
	if _, err := a.ReloadToken(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the report sent again with B", func() bool { return len(attempts()) == 2 })
	testkit.WaitFor(t, "the queue empty", func() bool { return a.q.len() == 0 })
	if g := attempts(); g[0] != "Bearer tok-A" || g[1] != "Bearer tok-B" {
		t.Errorf("attempts carried %q, want A then B", g)
	}
}

// TestTokenConcurrentReload: ReloadToken while reports go out (run with
// -race): each report carries one whole token, A or B.
func TestTokenConcurrentReload(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	a, file := newTokenAgent(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Authorization")]++
		mu.Unlock()
	}), Config{Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for i := range 50 {
		tok := "tok-A\n"
		if i%2 == 1 {
			tok = "tok-B\n"
		}
		// Rename, as operators should: a reader never sees half a file.
		tmp := file + ".new"
		writeToken(t, tmp, tok)
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
		if _, err := a.ReloadToken(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for auth := range seen {
		if auth != "Bearer tok-A" && auth != "Bearer tok-B" {
			t.Errorf("a report carried %q", auth)
		}
	}
}

// TestTokenFileNotRegular: a token file that is a FIFO (opening it blocks
// until a writer comes), /dev/zero (it never ends) or over 64 KiB is an
// error at once, at start, on ReloadToken (SIGHUP) and on a refusal's
// re-read, and the agent keeps the token it has.
func TestTokenFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := mkfifo(fifo); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	big := filepath.Join(dir, "big")
	writeToken(t, big, strings.Repeat("x", maxTokenFile+1))
	cases := []struct{ name, path, want string }{
		{"fifo", fifo, "token file: " + fifo + " is a named pipe (FIFO), not a regular file"},
		{"dev-zero", "/dev/zero", "token file: /dev/zero is a character device, not a regular file"},
		{"over 64 KiB", big, "token file: " + big + " is over 65536 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := New(Config{Node: "n1", Source: newFakeSource(), ReportURL: "http://127.0.0.1:1/", TokenFile: c.path})
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("New = %v, want an error saying %q", err, c.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("New did not return within 10 s")
			}

			good := filepath.Join(t.TempDir(), "token")
			writeToken(t, good, "tok-A\n")
			a, err := New(Config{Node: "n1", Source: newFakeSource(), ReportURL: "http://127.0.0.1:1/", TokenFile: good})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			a.tok.file = c.path // the file replaced by the bad one
			if _, err := a.ReloadToken(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ReloadToken = %v, want an error saying %q", err, c.want)
			}
			reread, _, err := a.tok.refused(time.Now())
			if !reread || err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("re-read after a 401 = %v, %v; want an error saying %q", reread, err, c.want)
			}
			if got := a.tok.get(); got != "tok-A" {
				t.Errorf("token now %q, want tok-A kept", got)
			}
		})
	}
}
