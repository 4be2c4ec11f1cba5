package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/filestore"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/notify"
	"github.com/proofkit/nodekit/examples/platform/internal/pgstore"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	webhookreceiver "github.com/proofkit/nodekit/examples/webhook-receiver"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// hook is the operator's receiver in these tests: a real HTTP server on
// loopback that verifies every message with the operator's package,
// records every attempt, and counts each webhook-id it accepted.
type hook struct {
	t       *testing.T
	clock   *platformtest.Clock
	secrets []string

	mu       sync.Mutex
	srv      *http.Server
	addr     string
	attempts []hookAttempt
	accepted map[string]int // webhook-id → 2xx answers given
	answer   int            // the status to answer; 0: 200
	hold     chan struct{}  // while not nil, requests wait for it to close
	held     atomic.Int32   // requests waiting on hold
}

type hookAttempt struct {
	ID       string
	At       time.Time // the platform's clock, as the test holds it
	Verified bool
	Err      string
	Msg      webhookreceiver.Message
	Body     []byte
	Status   int
	Headers  http.Header
}

// newHook starts a receiver; down, its port refuses connections until up.
func newHook(t *testing.T, c *platformtest.Clock, secrets ...string) *hook {
	h := &hook{t: t, clock: c, secrets: secrets, accepted: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	h.serve(ln)
	t.Cleanup(func() {
		h.mu.Lock()
		if h.hold != nil {
			close(h.hold)
			h.hold = nil
		}
		h.mu.Unlock()
		h.down()
	})
	return h
}

func (h *hook) url() string { return "http://" + h.addr + "/hook" }

func (h *hook) serve(ln net.Listener) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	h.mu.Lock()
	h.srv = srv
	h.mu.Unlock()
	go srv.Serve(ln)
}

// down closes the receiver: connections to its port are refused.
func (h *hook) down() {
	h.mu.Lock()
	srv := h.srv
	h.srv = nil
	h.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// up listens on the receiver's port again.
func (h *hook) up() {
	var ln net.Listener
	var err error
	testkit.WaitFor(h.t, "the receiver's port to be free again", func() bool {
		ln, err = net.Listen("tcp", h.addr)
		return err == nil
	})
	h.serve(ln)
}

func (h *hook) setAnswer(code int) { h.mu.Lock(); h.answer = code; h.mu.Unlock() }

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a := hookAttempt{ID: r.Header.Get("webhook-id"), At: h.clock.Now(), Headers: r.Header.Clone(), Body: body}
	_, err := webhookreceiver.Verify(h.secrets, r.Header, body, h.clock.Now())
	a.Verified = err == nil
	if err != nil {
		a.Err = err.Error()
	}
	json.Unmarshal(body, &a.Msg)
	h.mu.Lock()
	code, hold := h.answer, h.hold
	h.mu.Unlock()
	if hold != nil {
		h.held.Add(1)
		select {
		case <-hold:
		case <-r.Context().Done():
		}
		h.held.Add(-1)
	}
	if code == 0 {
		code = http.StatusOK
	}
	if !a.Verified {
		code = http.StatusUnauthorized
	}
	a.Status = code
	h.mu.Lock()
	h.attempts = append(h.attempts, a)
	if code/100 == 2 {
		h.accepted[a.ID]++
	}
	h.mu.Unlock()
	w.WriteHeader(code)
}

func (h *hook) snapshot() ([]hookAttempt, map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	acc := map[string]int{}
	for k, v := range h.accepted {
		acc[k] = v
	}
	return slices.Clone(h.attempts), acc
}

// notifyPlatform is a platform with its notifier.
type notifyPlatform struct {
	*apitest.Platform
	n *notify.Notifier
}

// notifyOpener starts a platform with a notifier on a subtest's store;
// called again, another on the same store (a restart, or a replica).
// A seed, if given, is the route table.
type notifyOpener func(c *platformtest.Clock, cfg notify.Config, seed ...*store.SeedFile) notifyPlatform

// notified opens a store with cfg's dispatch, as main does, and the
// notifier delivering its outbox, on clock c, logging to log.
func notified[S store.Store](t *testing.T, c *platformtest.Clock, cfg notify.Config, log *slog.Logger, open func(d *notify.Dispatch) (S, error)) (S, *notify.Notifier) {
	t.Helper()
	d := apitest.NewDispatch(t, cfg)
	st, err := open(d)
	if err != nil {
		t.Fatal(err)
	}
	return st, notify.New(cfg, d, st.Outbox(), log, c.Now)
}

// eachNotifyStore runs test on the file store and on PostgreSQL.
func eachNotifyStore(t *testing.T, test func(t *testing.T, open notifyOpener, replicas int)) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		test(t, func(c *platformtest.Clock, cfg notify.Config, seed ...*store.SeedFile) notifyPlatform {
			p, n := notified(t, c, cfg, platformtest.Logger(t), func(d *notify.Dispatch) (*filestore.Store, error) {
				return filestore.Open(store.Config{StateDir: dir, Now: c.Now, Logger: platformtest.Logger(t), Dispatch: d}, firstSeed(seed))
			})
			tp := serveNotifyTest(t, c, p, n)
			tp.Dir, tp.P = dir, p
			t.Cleanup(func() { p.Close() })
			return notifyPlatform{tp, n}
		}, 1)
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Need(t, cluster).NewDatabase(t)
		test(t, func(c *platformtest.Clock, cfg notify.Config, seed ...*store.SeedFile) notifyPlatform {
			p, n := notified(t, c, cfg, platformtest.Logger(t), func(d *notify.Dispatch) (*pgstore.Store, error) {
				return pgstore.Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t), Dispatch: d}, pgstore.Options{PlanEvery: 30 * time.Second, Batch: 8, Cache: 1000}, firstSeed(seed))
			})
			t.Cleanup(p.Close)
			return notifyPlatform{serveNotifyTest(t, c, p, n), n}
		}, 2)
	})
}

// fileNotified serves a platform over a file store in a new directory,
// with a notifier of cfg logging to log; both close when t ends.
func fileNotified(t *testing.T, c *platformtest.Clock, cfg notify.Config, log *slog.Logger) notifyPlatform {
	t.Helper()
	p, n := notified(t, c, cfg, log, func(d *notify.Dispatch) (*filestore.Store, error) {
		return filestore.Open(store.Config{StateDir: t.TempDir(), Now: c.Now, Logger: log, Dispatch: d}, nil)
	})
	t.Cleanup(func() { p.Close() })
	return notifyPlatform{serveNotifyTest(t, c, p, n), n}
}

// firstSeed is seed's first, or nil.
func firstSeed(seed []*store.SeedFile) *store.SeedFile {
	if len(seed) == 0 {
		return nil
	}
	return seed[0]
}

// drain pumps the notifiers at the clock's time until no attempt is in
// flight and none is due.
func drain(t *testing.T, ns ...*notify.Notifier) {
	t.Helper()
	for {
		var claimed int64
		for _, n := range ns {
			claimed += n.PumpOnce(t.Context())
		}
		if claimed == 0 {
			return
		}
	}
}

// overloadNode sends node the three readings of 95 % memory that make
// it overloaded, through the platforms in turn.
func overloadNode(t *testing.T, c *platformtest.Clock, node string, via ...notifyPlatform) {
	t.Helper()
	readEach(t, c, node, 3, 95, via)
}

// calm sends node the five readings of 40 % memory that end its
// overload, through the platforms in turn.
func calm(t *testing.T, c *platformtest.Clock, node string, via ...notifyPlatform) {
	t.Helper()
	readEach(t, c, node, 5, 40, via)
}

// readEach sends node count readings with memory at mem, a second apart,
// through the platforms in turn; each must be taken (200).
func readEach(t *testing.T, c *platformtest.Clock, node string, count int, mem float64, via []notifyPlatform) {
	t.Helper()
	for i := range count {
		c.Add(time.Second)
		if code := via[i%len(via)].Read(node, mem); code != 200 {
			t.Fatalf("reading of %s: %d", node, code)
		}
	}
}

// serveNotifyTest serves svc as main does: notices and views with their
// deliveries, and /metrics.
func serveNotifyTest(t *testing.T, c *platformtest.Clock, svc store.Store, n *notify.Notifier) *apitest.Platform {
	toks := api.Tokens{platformtest.TestToken: "", "x1-token": "x1"}
	srv := httptest.NewServer(api.Handler(fleet.New(svc, n), toks))
	t.Cleanup(srv.Close)
	return &apitest.Platform{T: t, Clock: c, Svc: svc, Srv: srv}
}

func (np notifyPlatform) Notices() []store.NumberedNotice {
	np.T.Helper()
	var out []store.NumberedNotice
	if code := np.Do("GET", "/notices", nil, &out); code != 200 {
		np.T.Fatalf("/notices: %d", code)
	}
	return out
}

// TestNotifyFiftyNodes: 50 nodes overloaded once each: 50 notices, 50
// distinct ids received, each verified by its signature, each message's
// text the notice's own; every delivery shows as delivered.
func TestNotifyFiftyNodes(t *testing.T) { eachNotifyStore(t, testNotifyFiftyNodes) }

func testNotifyFiftyNodes(t *testing.T, open notifyOpener, replicas int) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	ps, ns := openReplicas(open, c, cfg, replicas)
	for i := range 50 {
		overloadNode(t, c, fmt.Sprintf("n%02d", i), ps...)
	}
	drain(t, ns...)
	notices := ps[0].Notices()
	if len(notices) != 50 {
		t.Fatalf("%d notices, want 50", len(notices))
	}
	attempts, accepted := h.snapshot()
	if len(accepted) != 50 {
		t.Fatalf("%d distinct ids received, want 50", len(accepted))
	}
	byID := map[string]hookAttempt{}
	for _, a := range attempts {
		if !a.Verified {
			t.Fatalf("message %s does not verify: %s", a.ID, a.Err)
		}
		byID[a.ID] = a
	}
	for _, nt := range notices {
		a, ok := byID[nt.Delivery.ID]
		if !ok {
			t.Fatalf("notice %s (%s) never received", nt.Delivery.ID, nt.Text)
		}
		if a.Msg.Type != store.TypeOverloaded || a.Msg.Data.Text != nt.Text || a.Msg.Data.Node != nt.Node ||
			len(a.Msg.Data.Findings) != 1 || a.Msg.Data.Findings[0].Text != "memory at 95 %" ||
			a.Msg.Data.Findings[0].Figures["value"] != 95 || a.Msg.Data.Findings[0].Figures["limit"] != 90 {
			t.Fatalf("message %+v, notice %+v", a.Msg, nt.Notice)
		}
		if nt.Delivery.Status != store.StatusDelivered || nt.Delivery.Attempts != 1 || nt.Delivery.DeliveredAt.IsZero() {
			t.Fatalf("notice %s: delivery %+v, want delivered at the first attempt", nt.Delivery.ID, nt.Delivery)
		}
	}
	if len(attempts) != 50 {
		t.Errorf("%d attempts for 50 notices, want 50", len(attempts))
	}
	v := ps[len(ps)-1].Node("n07")
	if len(v.Deliveries) != 1 || v.Deliveries[0].Status != store.StatusDelivered || v.Deliveries[0].ID != notify.NoticeID("n07", platformtest.T0.Add(24*time.Second)) {
		t.Errorf("/nodes/n07 deliveries %+v", v.Deliveries)
	}
	if code, _, _ := ps[0].Raw("GET", "/metrics", "", ""); code != 401 {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	if code, _, _ := ps[0].Raw("GET", "/metrics", "x1-token", ""); code != 403 {
		t.Errorf("/metrics with a node's token: %d, want 403", code)
	}
	code, _, body := ps[0].Raw("GET", "/metrics", platformtest.TestToken, "")
	for _, want := range []string{`platform_notice_deliveries{status="delivered"} 50`, `platform_notice_deliveries{status="pending"} 0`,
		"platform_notice_oldest_pending_seconds 0"} {
		if code != 200 || !strings.Contains(string(body), want) {
			t.Errorf("/metrics %d, want %s in:\n%s", code, want, body)
		}
	}
}

// TestNotifyRetries: the receiver refuses connections for 10 minutes of
// the platform's clock, then answers 503 for 10 more, then 200: every
// notice arrives, and the attempts follow the back-off schedule (no two
// closer than the schedule allows, none later than it says).
func TestNotifyRetries(t *testing.T) { eachNotifyStore(t, testNotifyRetries) }

func testNotifyRetries(t *testing.T, open notifyOpener, replicas int) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	h.down()
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	ps, ns := openReplicas(open, c, cfg, replicas)
	const nodes = 5
	for i := range nodes {
		overloadNode(t, c, fmt.Sprintf("n%d", i), ps...)
	}
	start := c.Now()
	step := time.Second
	var refused int
	for c.Now().Sub(start) < 10*time.Minute {
		drain(t, ns...)
		if v := ps[0].Notices(); v[0].Delivery.Status == store.StatusPending && v[0].Delivery.LastError != "" {
			refused++
		}
		c.Add(step)
	}
	if refused == 0 {
		t.Fatal("no attempt recorded a connection error while the receiver was down")
	}
	for _, nt := range ps[0].Notices() {
		if nt.Delivery.Status != store.StatusPending {
			t.Fatalf("notice %s while the receiver is down: %+v, want pending", nt.Delivery.ID, nt.Delivery)
		}
		// 10 s base, doubling, at most 2 min, with jitter down to half:
		// at most 1 + the attempts that fit in 10 minutes at the shortest.
		if most := attemptsWithin(10*time.Minute, cfg); nt.Delivery.Attempts > most || nt.Delivery.Attempts < 4 {
			t.Fatalf("notice %s: %d attempts in 10 minutes down, want 4 to %d", nt.Delivery.ID, nt.Delivery.Attempts, most)
		}
	}
	h.setAnswer(http.StatusServiceUnavailable)
	h.up()
	for c.Now().Sub(start) < 20*time.Minute {
		drain(t, ns...)
		c.Add(step)
	}
	h.setAnswer(http.StatusOK)
	for c.Now().Sub(start) < 25*time.Minute {
		drain(t, ns...)
		c.Add(step)
	}
	attempts, accepted := h.snapshot()
	if len(accepted) != nodes {
		t.Fatalf("%d ids delivered, want %d", len(accepted), nodes)
	}
	last := map[string]time.Time{}
	n503 := map[string]int{}
	for _, a := range attempts {
		if a.Status == 503 {
			n503[a.ID]++
		}
		if prev, ok := last[a.ID]; ok && a.At.Sub(prev) < cfg.BackoffBase/2 {
			t.Fatalf("%s: attempts %v apart, less than the schedule's shortest wait", a.ID, a.At.Sub(prev))
		}
		last[a.ID] = a.At
	}
	for _, nt := range ps[0].Notices() {
		if nt.Delivery.Status != store.StatusDelivered {
			t.Fatalf("notice %s: %+v, want delivered", nt.Delivery.ID, nt.Delivery)
		}
		// Waits capped at 2 min: 10 minutes of 503 take 5 to 10 attempts.
		if n503[nt.Delivery.ID] < 4 || n503[nt.Delivery.ID] > 11 {
			t.Errorf("notice %s: %d attempts answered 503 in 10 minutes, want 5 to 10", nt.Delivery.ID, n503[nt.Delivery.ID])
		}
	}
}

// attemptsWithin is the most attempts the schedule makes in d: every wait
// at its shortest (half, with jitter).
func attemptsWithin(d time.Duration, cfg notify.Config) int {
	n, spent := 1, time.Duration(0)
	for {
		spent += notify.Backoff(cfg.BackoffBase, cfg.BackoffMax, n, 0)
		if spent > d {
			return n
		}
		n++
	}
}

// TestNotifyOncePerHour: a node overloaded, recovered and overloaded
// again within the hour, its readings spread over the replicas: one
// notice, one delivery.
func TestNotifyOncePerHour(t *testing.T) { eachNotifyStore(t, testNotifyOncePerHour) }

func testNotifyOncePerHour(t *testing.T, open notifyOpener, replicas int) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "x9 "+h.url()+" "+platformtest.HookSecret))
	ps, ns := openReplicas(open, c, cfg, replicas)
	for range 3 {
		overloadNode(t, c, "x9", ps...)
		calm(t, c, "x9", ps...)
		drain(t, ns...)
		c.Add(10 * time.Minute)
	}
	attempts, accepted := h.snapshot()
	if len(attempts) != 1 || len(accepted) != 1 {
		t.Fatalf("%d attempts, %d ids delivered; want exactly one delivery", len(attempts), len(accepted))
	}
	if ns := ps[0].Notices(); len(ns) != 1 {
		t.Fatalf("%d notices, want 1", len(ns))
	}
}

// TestNotifyRotationAndGone: with two secrets each message carries two
// signatures and each verifies alone; a receiver answering 410 gets no
// more attempts until the file changes; another node's receiver is not
// held back meanwhile.
func TestNotifyRotationAndGone(t *testing.T) { eachNotifyStore(t, testNotifyRotationAndGone) }

func testNotifyRotationAndGone(t *testing.T, open notifyOpener, replicas int) {
	c := &platformtest.Clock{T: platformtest.T0}
	gone := newHook(t, c, platformtest.HookSecret)
	other := newHook(t, c, platformtest.HookSecret2)
	file := apitest.NotifyFile(t, "# rotating a0's secret", "a0 "+gone.url()+" "+platformtest.HookSecret+" "+platformtest.HookSecret2, "b0 "+other.url()+" "+platformtest.HookSecret2)
	cfg := apitest.NotifyConfig(file)
	p := open(c, cfg)
	overloadNode(t, c, "a0", p)
	drain(t, p.n)
	attempts, _ := gone.snapshot()
	if len(attempts) != 1 {
		t.Fatalf("%d attempts, want 1", len(attempts))
	}
	sigs := strings.Fields(attempts[0].Headers.Get("webhook-signature"))
	if len(sigs) != 2 {
		t.Fatalf("webhook-signature %q: want two signatures, one per secret", sigs)
	}
	// Each signature alone verifies with its own secret, and not with
	// the other.
	for i, s := range []string{platformtest.HookSecret, platformtest.HookSecret2} {
		hd := attempts[0].Headers.Clone()
		hd.Set("webhook-signature", sigs[i])
		if _, err := webhookreceiver.Verify([]string{s}, hd, attempts[0].Body, c.Now()); err != nil {
			t.Fatalf("signature %d with secret %d: %v", i+1, i+1, err)
		}
		if _, err := webhookreceiver.Verify([]string{platformtest.HookSecret, platformtest.HookSecret2}[1-i:2-i], hd, attempts[0].Body, c.Now()); err == nil {
			t.Fatalf("signature %d verified with the other secret", i+1)
		}
	}
	// A receiver holding only the new secret accepts the messages.
	c.Add(time.Hour)
	gone2 := newHook(t, c, platformtest.HookSecret2)
	apitest.WriteFile(t, file, "a0 "+gone2.url()+" "+platformtest.HookSecret+" "+platformtest.HookSecret2+"\nb0 "+other.url()+" "+platformtest.HookSecret2+"\n")
	reload(t, p.n)
	calm(t, c, "a0", p)
	overloadNode(t, c, "a0", p)
	drain(t, p.n)
	if _, acc := gone2.snapshot(); len(acc) != 1 {
		t.Fatalf("the receiver holding only the second secret accepted %d messages, want 1", len(acc))
	}

	// 410: that receiver is disabled; b0's is not held back.
	gone2.setAnswer(http.StatusGone)
	for range 2 {
		c.Add(time.Hour)
		calm(t, c, "a0", p)
		overloadNode(t, c, "a0", p)
		overloadNode(t, c, "b0", p)
		calm(t, c, "b0", p)
		drain(t, p.n)
	}
	if at, _ := gone2.snapshot(); len(at) != 2 {
		t.Fatalf("%d attempts to the receiver, want 2 (the one accepted, then the 410; none while disabled)", len(at))
	}
	if _, acc := other.snapshot(); len(acc) != 2 {
		t.Fatalf("b0's receiver got %d messages, want 2 (one a notice an hour, for two hours)", len(acc))
	}
	var failed int
	for _, nt := range p.Notices() {
		if nt.Node == "a0" && nt.Delivery.Status == store.StatusFailed && nt.Delivery.LastStatus == http.StatusGone {
			failed++
		}
	}
	if failed != 2 {
		t.Fatalf("%d of a0's notices failed with 410, want 2", failed)
	}
	// The file changes: the receiver is tried again.
	gone2.setAnswer(http.StatusOK)
	apitest.WriteFile(t, file, "a0 "+gone2.url()+" "+platformtest.HookSecret2+"\n")
	reload(t, p.n)
	c.Add(time.Hour)
	calm(t, c, "a0", p)
	overloadNode(t, c, "a0", p)
	drain(t, p.n)
	if _, acc := gone2.snapshot(); len(acc) != 2 {
		t.Fatalf("after the file changed, the receiver accepted %d messages in all, want 2", len(acc))
	}
}

func reload(t *testing.T, n *notify.Notifier) {
	t.Helper()
	if err := n.Reload(); err != nil {
		t.Fatal(err)
	}
}

// TestNotifyUndeliverable: a node without a receiver keeps its notice,
// marked undeliverable; nothing is sent.
func TestNotifyUndeliverable(t *testing.T) { eachNotifyStore(t, testNotifyUndeliverable) }

func testNotifyUndeliverable(t *testing.T, open notifyOpener, _ int) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	p := open(c, apitest.NotifyConfig(apitest.NotifyFile(t, "other "+h.url()+" "+platformtest.HookSecret)))
	overloadNode(t, c, "lonely", p)
	drain(t, p.n)
	ns := p.Notices()
	if len(ns) != 1 || ns[0].Delivery.Status != store.StatusUndeliverable {
		t.Fatalf("notices %+v, want one, undeliverable", ns)
	}
	if at, _ := h.snapshot(); len(at) != 0 {
		t.Fatalf("%d attempts, want none", len(at))
	}
}

// TestNotifyFailureLogsHostOnly: a receiver URL with userinfo and a
// token in its query is logged by its host alone; a 4xx other than 408,
// 410 and 429 is failed at once.
func TestNotifyFailureLogsHostOnly(t *testing.T) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	h.setAnswer(http.StatusBadRequest)
	var log testkit.LogBuffer
	secretURL := "http://ops:hunter2@" + h.addr + "/hook?token=tok-abc123"
	file := apitest.NotifyFile(t, "* "+secretURL+" "+platformtest.HookSecret)
	tp := fileNotified(t, c, apitest.NotifyConfig(file), slogTo(&log))
	n := tp.n
	overloadNode(t, c, "x", tp)
	drain(t, n)
	c.Add(time.Hour)
	drain(t, n)
	if at, _ := h.snapshot(); len(at) != 1 {
		t.Fatalf("%d attempts, want 1: a 400 is not retried", len(at))
	}
	out := log.String()
	if !strings.Contains(out, "notify: delivery failed") || !strings.Contains(out, "receiver="+h.addr) {
		t.Fatalf("no failure line naming the receiver's host:\n%s", out)
	}
	for _, leak := range []string{"hunter2", "tok-abc123", "whsec_", "ops:"} {
		if strings.Contains(out, leak) {
			t.Fatalf("the log holds %q:\n%s", leak, out)
		}
	}
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// TestNotifySlowReceiver: a receiver that does not answer holds a few
// attempts in flight, never the others' deliveries.
func TestNotifySlowReceiver(t *testing.T) {
	c := &platformtest.Clock{T: platformtest.T0}
	slow, fast := newHook(t, c, platformtest.HookSecret), newHook(t, c, platformtest.HookSecret)
	slow.mu.Lock()
	slow.hold = make(chan struct{})
	slow.mu.Unlock()
	lines := []string{"* " + fast.url() + " " + platformtest.HookSecret}
	for i := range 10 {
		lines = append(lines, fmt.Sprintf("s%d %s %s", i, slow.url(), platformtest.HookSecret))
	}
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, lines...))
	cfg.Timeout = time.Minute // the slow receiver holds its requests until released
	tp := fileNotified(t, c, cfg, platformtest.Logger(t))
	n := tp.n
	for i := range 10 {
		overloadNode(t, c, fmt.Sprintf("s%d", i), tp)
	}
	for i := range 10 {
		overloadNode(t, c, fmt.Sprintf("f%d", i), tp)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	testkit.WaitFor(t, "every fast node's notice delivered while the slow receiver holds its requests", func() bool {
		_, acc := fast.snapshot()
		return len(acc) == 10
	})
	testkit.WaitFor(t, "the slow receiver to hold its share of requests", func() bool {
		if held := slow.held.Load(); held > int32(notify.DefaultPerReceiver) {
			t.Fatalf("%d requests held by the slow receiver, more than its share (%d)", held, notify.DefaultPerReceiver)
		}
		return slow.held.Load() == int32(notify.DefaultPerReceiver)
	})
	slow.mu.Lock()
	close(slow.hold)
	slow.hold = nil
	slow.mu.Unlock()
	testkit.WaitFor(t, "the slow receiver's notices delivered once it answers", func() bool {
		c.Add(time.Second)
		n.Poke()
		_, acc := slow.snapshot()
		return len(acc) == 10
	})
	cancel()
	<-done
}

// TestNotifyHangingReceivers: ten receivers that hang (each holding
// every request it gets for longer than the test) and one that answers,
// on both stores. The hanging receivers' 80 notices are older than the
// healthy one's and more than the replicas' attempts in flight, yet the
// healthy receiver has its notice within a second of its decision: a
// receiver that hangs holds back only its own messages.
func TestNotifyHangingReceivers(t *testing.T) { eachNotifyStore(t, testNotifyHangingReceivers) }

func testNotifyHangingReceivers(t *testing.T, open notifyOpener, replicas int) {
	c := &platformtest.Clock{T: platformtest.T0}
	healthy := newHook(t, c, platformtest.HookSecret)
	lines := []string{"ok " + healthy.url() + " " + platformtest.HookSecret}
	var hanging []*hook
	for i := range 10 {
		h := newHook(t, c, platformtest.HookSecret)
		h.mu.Lock()
		h.hold = make(chan struct{})
		h.mu.Unlock()
		hanging = append(hanging, h)
		for j := range 8 {
			lines = append(lines, fmt.Sprintf("h%d-%d %s %s", i, j, h.url(), platformtest.HookSecret))
		}
	}
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, lines...))
	cfg.Timeout = time.Minute // longer than the test: the receivers hang
	ps, ns := openReplicas(open, c, cfg, replicas)
	hangAndDeliver(t, c, ps, ns, hanging, healthy)
	for _, h := range hanging {
		if _, acc := h.snapshot(); len(acc) != 0 {
			t.Errorf("a hanging receiver accepted %d messages", len(acc))
		}
	}
}

// TestNotifyHangingOperatorReceivers: as TestNotifyHangingReceivers,
// the receivers being the operators' own (PUT /receiver) instead of the
// notify file's lines: ten operators' receivers hang, and an eleventh
// operator's notice arrives within a second of its decision.
func TestNotifyHangingOperatorReceivers(t *testing.T) {
	eachNotifyStore(t, testNotifyHangingOperatorReceivers)
}

func testNotifyHangingOperatorReceivers(t *testing.T, open notifyOpener, replicas int) {
	c := &platformtest.Clock{T: platformtest.T0}
	cfg := apitest.NotifyConfig("")
	cfg.Timeout = time.Minute // longer than the test: the receivers hang
	ps, ns := openReplicas(open, c, cfg, replicas)
	owners := map[string]string{"ok": "healthy"}
	for i := range 10 {
		for j := range 8 {
			owners[fmt.Sprintf("h%d-%d", i, j)] = fmt.Sprintf("op%d", i)
		}
	}
	var fs []*fleet.Fleet
	for _, p := range ps {
		f := fleet.New(p.Svc, p.n)
		f.Owners = owners
		fs = append(fs, f)
	}
	set := func(op string, h *hook) {
		t.Helper()
		v, _, err := fs[0].SetReceiver(t.Context(), op, fleet.ReceiverRequest{URL: h.url()})
		if err != nil {
			t.Fatal(err)
		}
		h.mu.Lock()
		h.secrets = []string{v.Secret}
		h.mu.Unlock()
	}
	healthy := newHook(t, c)
	set("healthy", healthy)
	var hanging []*hook
	for i := range 10 {
		h := newHook(t, c)
		h.mu.Lock()
		h.hold = make(chan struct{})
		h.mu.Unlock()
		hanging = append(hanging, h)
		set(fmt.Sprintf("op%d", i), h)
	}
	for _, f := range fs {
		f.NotifyUnreached(t.Context(), platformtest.Logger(t)) // every replica reads them, as at its start
	}
	hangAndDeliver(t, c, ps, ns, hanging, healthy)
}

// hangAndDeliver is the hanging receivers' scenario once the receivers
// are set: the 80 nodes h0-0…h9-7, whose receivers hang, overload; the
// replicas' notifiers run until every attempt slot is taken by them; then
// node ok overloads, and its receiver, healthy, must have the notice
// within a second. The hanging receivers are let go when t ends.
func hangAndDeliver(t *testing.T, c *platformtest.Clock, ps []notifyPlatform, ns []*notify.Notifier, hanging []*hook, healthy *hook) {
	t.Helper()
	for i := range 10 {
		for j := range 8 {
			overloadNode(t, c, fmt.Sprintf("h%d-%d", i, j), ps...)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	var running sync.WaitGroup
	for _, n := range ns {
		running.Go(func() { n.Run(ctx) })
	}
	t.Cleanup(func() {
		for _, h := range hanging {
			h.mu.Lock()
			close(h.hold)
			h.hold = nil
			h.mu.Unlock()
		}
		cancel()
		running.Wait()
	})
	testkit.WaitFor(t, "every attempt slot of the replicas taken by the hanging receivers", func() bool {
		total := 0
		for _, n := range ns {
			total += n.AttemptsInFlight()
		}
		return total >= notify.DefaultMaxInFlight*len(ns)
	})
	overloadNode(t, c, "ok", ps...)
	testkit.WaitForWithin(t, time.Second, "the healthy receiver's notice delivered while ten others hang", func() bool {
		_, acc := healthy.snapshot()
		return len(acc) == 1
	})
}

// TestNotifyStopMidAttempt: a replica that stops (SIGTERM) while an
// attempt waits on its receiver records it as the platform's doing,
// not the receiver's: the delivery stays pending, due again at once
// (for another replica, or this one restarted) rather than after a
// back-off of up to an hour, its log saying why, on both stores.
func TestNotifyStopMidAttempt(t *testing.T) { eachNotifyStore(t, testNotifyStopMidAttempt) }

func testNotifyStopMidAttempt(t *testing.T, open notifyOpener, _ int) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	h.mu.Lock()
	h.hold = make(chan struct{})
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		close(h.hold)
		h.hold = nil
		h.mu.Unlock()
	}()
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	cfg.Timeout = time.Minute
	np := open(c, cfg)
	overloadNode(t, c, "s1", np)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); np.n.Run(ctx) }()
	testkit.WaitFor(t, "the attempt at the receiver", func() bool { return h.held.Load() == 1 })
	c.Add(time.Second)
	cancel()
	<-done
	ns := np.Notices()
	if len(ns) != 1 || ns[0].Delivery == nil {
		t.Fatalf("notices %+v, want one with its delivery", ns)
	}
	d := ns[0].Delivery
	if d.Status != store.StatusPending || d.NextAttempt.After(c.Now()) || len(d.Log) != 1 || !strings.Contains(d.Log[0].Error, "the platform stopped") {
		t.Errorf("the delivery after a stop mid-attempt: %+v, want pending, due now (%v), its log saying the platform stopped", d, c.Now())
	}
}

// TestNotifyCrashAndRestart, on PostgreSQL: a replica dies in the middle
// of its deliveries (its attempts reach the receiver, their results are
// never recorded) and the database restarts while readings arrive: every
// notice arrives at least once, never under two ids, and the duplicates
// of an id are those of the crash.
func TestNotifyCrashAndRestart(t *testing.T) {
	cl := pgtest.Need(t, cluster)
	url := cl.NewDatabase(t)
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	// Each replica's notifier delivers its store's outbox through a
	// swapBox, which the test replaces to kill the replica.
	open := func() (notifyPlatform, *swapBox) {
		d := apitest.NewDispatch(t, cfg)
		p, err := pgstore.Open(t.Context(), url, store.Config{Now: c.Now, Logger: platformtest.Logger(t), Dispatch: d}, pgstore.Options{PlanEvery: 30 * time.Second, Batch: 8, Cache: 1000}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		box := &swapBox{p.Outbox()}
		n := notify.New(cfg, d, box, platformtest.Logger(t), c.Now)
		return notifyPlatform{serveNotifyTest(t, c, p, n), n}, box
	}
	a, aBox := open()
	b, bBox := open()
	for i := range 10 {
		overloadNode(t, c, fmt.Sprintf("c%d", i), a, b)
	}
	// a claims and sends; it dies before recording a result.
	aBox.OutboxStore = deadAfterSend{aBox.OutboxStore}
	drain(t, a.n)
	inCrash, _ := h.snapshot()
	if len(inCrash) == 0 {
		t.Fatal("the dying replica sent nothing")
	}
	// Readings go on while the database restarts; b delivers, and an
	// attempt whose result it cannot record while the database is down
	// is made again: those are in the crash window too.
	unrecorded := &recordingBox{OutboxStore: bBox.OutboxStore, failed: map[string]bool{}}
	bBox.OutboxStore = unrecorded
	restarted := make(chan error, 1)
	go func() { restarted <- cl.Restart() }()
	sent := 10
	deadline := time.Now().Add(2 * time.Minute)
	for len(restarted) == 0 || sent < 20 {
		if time.Now().After(deadline) {
			t.Fatal("the database did not come back within 2 minutes")
		}
		node := fmt.Sprintf("c%d", sent)
		for i := 0; i < 3; {
			c.Add(time.Second)
			code := b.Read(node, 95)
			if code == 200 {
				i++
				continue
			}
			if code != 503 {
				t.Fatalf("reading of %s: %d", node, code)
			}
			time.Sleep(20 * time.Millisecond)
		}
		sent++
		// The attempts end (their results recorded, or lost to the
		// restart) before the test's clock moves on: on a real clock the
		// lease outlasts an attempt.
		b.n.PumpOnce(t.Context())
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	c.Add(cfg.Lease + time.Second) // a's claims run out
	testkit.WaitFor(t, "every notice delivered", func() bool {
		drain(t, b.n)
		c.Add(time.Minute)
		_, acc := h.snapshot()
		return len(acc) == sent
	})
	attempts, accepted := h.snapshot()
	crashed := unrecorded.ids()
	for _, at := range inCrash {
		crashed[at.ID] = true
	}
	var dups []string
	for id, k := range accepted {
		if k > 1 {
			dups = append(dups, fmt.Sprintf("%s×%d", id, k))
			if !crashed[id] || k > 2 {
				t.Errorf("%s received %d times; only an attempt whose result was lost may repeat, once", id, k)
			}
		}
	}
	byNode := map[string]map[string]bool{}
	for _, at := range attempts {
		if byNode[at.Msg.Data.Node] == nil {
			byNode[at.Msg.Data.Node] = map[string]bool{}
		}
		byNode[at.Msg.Data.Node][at.ID] = true
	}
	for node, ids := range byNode {
		if len(ids) != 1 {
			t.Errorf("node %s's notice received under %d ids", node, len(ids))
		}
	}
	slices.Sort(dups)
	t.Logf("%d notices, %d attempts, %d sent by the dead replica, %d results lost to the restart, duplicates: %v",
		sent, len(attempts), len(inCrash), len(unrecorded.ids()), dups)
}

// swapBox is an outbox the test replaces between its notifier's pumps.
type swapBox struct{ store.OutboxStore }

// deadAfterSend is the outbox of a replica that dies after sending: it
// claims, and never records what an attempt did.
type deadAfterSend struct{ store.OutboxStore }

func (deadAfterSend) Settle(context.Context, store.Delivery, store.AttemptResult) error {
	return errors.New("replica gone")
}

// recordingBox records the deliveries whose result could not be written.
type recordingBox struct {
	store.OutboxStore
	mu     sync.Mutex
	failed map[string]bool
}

func (r *recordingBox) Settle(ctx context.Context, d store.Delivery, res store.AttemptResult) error {
	err := r.OutboxStore.Settle(ctx, d, res)
	if err != nil {
		r.mu.Lock()
		r.failed[d.ID] = true
		r.mu.Unlock()
	}
	return err
}

func (r *recordingBox) ids() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for id := range r.failed {
		out[id] = true
	}
	return out
}

// TestNotifyFileOutboxReplay: the file store's pending deliveries survive
// a restart and are delivered after it; an entry whose notice never
// reached the node's file (a crash between the two writes) is dropped.
func TestNotifyFileOutboxReplay(t *testing.T) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	h.down()
	dir := t.TempDir()
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	open := func() (*filestore.Store, *notify.Notifier) {
		p, n := notified(t, c, cfg, platformtest.Logger(t), func(d *notify.Dispatch) (*filestore.Store, error) {
			return filestore.Open(store.Config{StateDir: dir, Now: c.Now, Logger: platformtest.Logger(t), Dispatch: d}, nil)
		})
		return p, n
	}
	p, n := open()
	tp := notifyPlatform{serveNotifyTest(t, c, p, n), n}
	overloadNode(t, c, "r1", tp)
	drain(t, n)
	// A crash after the outbox's append, before the node's file: an
	// entry for a notice r2's file does not hold.
	ghost, err := n.NoticeDelivery(overload.Notice{Node: "r1", At: c.Now().Add(time.Hour), Text: "never saved"}, 1, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	put, err := json.Marshal(map[string]any{"op": "put", "d": ghost})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "outbox.log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(append(put, '\n'))
	// Half a line at the end, as a crash mid-append leaves it.
	f.WriteString(`{"op":"put","d":{"id":"ntc_`)
	f.Close()

	h.up()
	p, n = open()
	defer p.Close()
	c.Add(time.Hour)
	drain(t, n)
	_, acc := h.snapshot()
	if len(acc) != 1 || acc[notify.NoticeID("r1", platformtest.T0.Add(3*time.Second))] != 1 {
		t.Fatalf("delivered after the restart: %v, want r1's notice once", acc)
	}
	if d, _ := p.Outbox().ByIDs(t.Context(), []string{ghost.ID}); len(d) != 0 {
		t.Fatalf("the unsaved notice's entry was kept: %+v", d)
	}
}

// TestNotifyTimeout: a receiver that does not answer within the timeout
// is retried later, the attempt recorded as timed out.
func TestNotifyTimeout(t *testing.T) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	h.mu.Lock()
	h.hold = make(chan struct{})
	h.mu.Unlock()
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	cfg.Timeout = 200 * time.Millisecond
	tp := fileNotified(t, c, cfg, platformtest.Logger(t))
	n := tp.n
	overloadNode(t, c, "slow", tp)
	drain(t, n)
	ns := tp.Notices()
	if d := ns[0].Delivery; d.Status != store.StatusPending || d.Attempts != 1 || d.LastError != "timed out" ||
		d.NextAttempt.Sub(c.Now()) < cfg.BackoffBase/2 {
		t.Fatalf("delivery %+v: want pending after one timed-out attempt, the next one at least %v later", d, cfg.BackoffBase/2)
	}
}

// TestNotifyEnded: with -notify-ended, the end of an overload is sent as
// node.overload_ended too; without it, only the start. An overload whose
// start had no notice (within the hour of the last) sends no end.
func TestNotifyEnded(t *testing.T) { eachNotifyStore(t, testNotifyEnded) }

func testNotifyEnded(t *testing.T, open notifyOpener, replicas int) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	cfg.Ended = true
	ps, ns := openReplicas(open, c, cfg, replicas)
	overloadNode(t, c, "e1", ps...)
	calm(t, c, "e1", ps...)
	drain(t, ns...)
	attempts, accepted := h.snapshot()
	if len(accepted) != 2 || len(attempts) != 2 {
		t.Fatalf("%d ids, %d attempts; want the start and the end, once each", len(accepted), len(attempts))
	}
	if a, b := attempts[0].Msg, attempts[1].Msg; a.Type == b.Type || (a.Type != store.TypeOverloadEnded && b.Type != store.TypeOverloadEnded) {
		t.Fatalf("types %s and %s, want %s and %s", a.Type, b.Type, store.TypeOverloaded, store.TypeOverloadEnded)
	}
	for _, a := range attempts {
		if a.Msg.Type == store.TypeOverloadEnded && (a.Msg.Data.Lasted == "" || !strings.Contains(a.Msg.Data.Text, "e1 is no longer overloaded")) {
			t.Fatalf("end message %+v", a.Msg.Data)
		}
	}
	// Overloaded again within the hour: no notice, so no end either;
	// an end alone would follow no node.overloaded of its overload.
	c.Add(10 * time.Minute)
	overloadNode(t, c, "e1", ps...)
	calm(t, c, "e1", ps...)
	drain(t, ns...)
	if attempts, _ := h.snapshot(); len(attempts) != 2 {
		for _, a := range attempts[2:] {
			t.Errorf("an overload within the hour, which had no notice, sent %s %s", a.Msg.Type, a.Msg.Data.Text)
		}
	}
}

// TestNotifyOrder: a node's node.overload_ended is never delivered
// before its node.overloaded: with the receiver failing (503) while the
// notice is retried, the end, decided meanwhile, is not attempted until
// the notice is delivered, across replicas; and another node's messages
// are not held back by it.
func TestNotifyOrder(t *testing.T) { eachNotifyStore(t, testNotifyOrder) }

func testNotifyOrder(t *testing.T, open notifyOpener, replicas int) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	other := newHook(t, c, platformtest.HookSecret)
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "o1 "+h.url()+" "+platformtest.HookSecret, "o2 "+other.url()+" "+platformtest.HookSecret))
	cfg.Ended = true
	ps, ns := openReplicas(open, c, cfg, replicas)
	h.setAnswer(http.StatusServiceUnavailable)
	overloadNode(t, c, "o1", ps...)
	drain(t, ns...)
	calm(t, c, "o1", ps...)
	overloadNode(t, c, "o2", ps...)
	calm(t, c, "o2", ps...)
	for range 5 * 60 {
		drain(t, ns...)
		c.Add(time.Second)
	}
	attempts, _ := h.snapshot()
	for _, a := range attempts {
		if a.Msg.Type != store.TypeOverloaded {
			t.Fatalf("%s attempted while the node's notice is not delivered", a.Msg.Type)
		}
	}
	if len(attempts) < 3 {
		t.Fatalf("%d attempts of the notice in 5 minutes", len(attempts))
	}
	if _, acc := other.snapshot(); len(acc) != 2 {
		t.Fatalf("another node's receiver accepted %d messages, want its notice and its end", len(acc))
	}
	h.setAnswer(http.StatusOK)
	for range 5 * 60 {
		drain(t, ns...)
		c.Add(time.Second)
	}
	attempts, acc := h.snapshot()
	if len(acc) != 2 {
		t.Fatalf("%d messages accepted once the receiver answers, want the notice and the end", len(acc))
	}
	noticeAt := -1
	for i, a := range attempts {
		switch {
		case a.Msg.Type == store.TypeOverloaded && a.Status == 200:
			noticeAt = i
		case a.Msg.Type == store.TypeOverloadEnded && noticeAt < 0:
			t.Fatalf("the end attempted (attempt %d) before the notice was delivered", i)
		}
	}
}

// TestNotifyRedeliver: each notice carries its delivery log (every
// attempt's time and status or error); POST /notices/N/redeliver sends a
// delivered notice again with its first webhook-id, and its log grows.
func TestNotifyRedeliver(t *testing.T) { eachNotifyStore(t, testNotifyRedeliver) }

func testNotifyRedeliver(t *testing.T, open notifyOpener, replicas int) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	ps, ns := openReplicas(open, c, cfg, replicas)
	h.setAnswer(http.StatusServiceUnavailable)
	overloadNode(t, c, "d1", ps...)
	drain(t, ns...)
	h.setAnswer(http.StatusOK)
	c.Add(10 * time.Minute)
	drain(t, ns...)
	nt := ps[0].Notices()[0]
	if log := nt.Delivery.Log; nt.Delivery.Status != store.StatusDelivered || len(log) != 2 || log[0].Status != 503 || log[0].Error == "" || log[1].Status != 200 || log[1].At.Before(log[0].At) {
		t.Fatalf("the delivery after a 503 and a 200: %+v", nt.Delivery)
	}
	if code, _, b := ps[0].Raw("POST", fmt.Sprintf("/notices/%d/redeliver", nt.ID), platformtest.TestToken, ""); code != http.StatusAccepted {
		t.Fatalf("redeliver: %d %s", code, b)
	}
	if code, _, _ := ps[0].Raw("POST", "/notices/9999/redeliver", platformtest.TestToken, ""); code != http.StatusNotFound {
		t.Errorf("redeliver of an unknown notice: %d, want 404", code)
	}
	drain(t, ns...)
	if _, acc := h.snapshot(); acc[nt.Delivery.ID] != 2 || len(acc) != 1 {
		t.Fatalf("accepted %v, want %s twice", acc, nt.Delivery.ID)
	}
	if d := ps[len(ps)-1].Notices()[0].Delivery; d.Status != store.StatusDelivered || len(d.Log) != 3 {
		t.Fatalf("the delivery after its redelivery: %+v", d)
	}
}

// TestNotifyRedeliverRetries: a notice redelivered after -notify-give-up
// has passed since it was decided (its receiver mended after days down)
// is retried as a new message is, for another -notify-give-up, not failed
// at its first 503; and the oldest pending figure runs from the request.
func TestNotifyRedeliverRetries(t *testing.T) { eachNotifyStore(t, testNotifyRedeliverRetries) }

func testNotifyRedeliverRetries(t *testing.T, open notifyOpener, replicas int) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	cfg.GiveUp = time.Hour
	ps, ns := openReplicas(open, c, cfg, replicas)
	overloadNode(t, c, "d1", ps...)
	drain(t, ns...)
	nt := ps[0].Notices()[0]
	if nt.Delivery.Status != store.StatusDelivered {
		t.Fatalf("the first delivery: %+v", nt.Delivery)
	}
	c.Add(2 * cfg.GiveUp)
	h.setAnswer(http.StatusServiceUnavailable)
	if code, _, b := ps[0].Raw("POST", fmt.Sprintf("/notices/%d/redeliver", nt.ID), platformtest.TestToken, ""); code != http.StatusAccepted {
		t.Fatalf("redeliver: %d %s", code, b)
	}
	drain(t, ns...)
	if d := ps[len(ps)-1].Notices()[0].Delivery; d.Status != store.StatusPending || d.LastStatus != 503 {
		t.Fatalf("the redelivery after one 503: %+v, want pending, to be retried", d)
	}
	if _, oldest, err := ps[0].Svc.Outbox().Counts(t.Context()); err != nil || !oldest.Equal(c.Now()) {
		t.Errorf("the oldest pending delivery from %v (%v), want %v, the redelivery", oldest, err, c.Now())
	}
	h.setAnswer(http.StatusOK)
	c.Add(10 * time.Minute)
	drain(t, ns...)
	if d := ps[0].Notices()[0].Delivery; d.Status != store.StatusDelivered {
		t.Fatalf("the redelivery once the receiver answers: %+v", d)
	}
}

// TestNotifyGiveUp: a receiver answering 503 past -notify-give-up: the
// delivery is failed, and no attempt is made after.
func TestNotifyGiveUp(t *testing.T) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	h.setAnswer(http.StatusServiceUnavailable)
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	cfg.GiveUp = 5 * time.Minute
	tp := fileNotified(t, c, cfg, platformtest.Logger(t))
	n := tp.n
	overloadNode(t, c, "g1", tp)
	start := c.Now()
	for c.Now().Sub(start) < 10*time.Minute {
		drain(t, n)
		c.Add(5 * time.Second)
	}
	d := tp.Notices()[0].Delivery
	if d.Status != store.StatusFailed || !strings.Contains(d.LastError, "given up after") || d.LastStatus != 503 {
		t.Fatalf("delivery %+v, want failed: given up", d)
	}
	attempts, _ := h.snapshot()
	if last := attempts[len(attempts)-1].At; last.Sub(start) > cfg.GiveUp+cfg.BackoffMax {
		t.Fatalf("an attempt %v after the start, past the give-up", last.Sub(start))
	}
}

// openReplicas opens replicas platforms of one store on clock c with
// cfg, and returns them with their notifiers.
func openReplicas(open notifyOpener, c *platformtest.Clock, cfg notify.Config, replicas int) ([]notifyPlatform, []*notify.Notifier) {
	var ps []notifyPlatform
	var ns []*notify.Notifier
	for range replicas {
		p := open(c, cfg)
		ps, ns = append(ps, p), append(ns, p.n)
	}
	return ps, ns
}

// TestNotifyUnreached: at start the platform names the nodes no line of
// the notify file reaches, on both stores.
func TestNotifyUnreached(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		tp := open(&platformtest.Clock{T: platformtest.T0}, platformtest.Seed())
		cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "x1 http://127.0.0.1:9/ "+platformtest.HookSecret))
		n := notify.New(cfg, apitest.NewDispatch(t, cfg), nil, platformtest.Logger(t), nil)
		var log testkit.LogBuffer
		fleet.New(tp.Svc, n).NotifyUnreached(t.Context(), slogTo(&log))
		if !strings.Contains(log.String(), "count=2 nodes=\"f1 x2\"") {
			t.Errorf("the start's log does not name f1 and x2:\n%s", log.String())
		}
	})
}
