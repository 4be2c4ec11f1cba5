package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/agent/agenttest"
	webhookreceiver "github.com/proofkit/nodekit/examples/webhook-receiver"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
	"github.com/proofkit/nodekit/routing"
)

// bins holds the binaries TestMain builds: proofkit-agent, platform and
// pinproxy.
var bins string

// build is what TestMain builds into bins.
var build = testkit.Build{
	Pkgs: []string{"github.com/proofkit/nodekit/cmd/proofkit-agent",
		"github.com/proofkit/nodekit/examples/platform",
		"github.com/proofkit/nodekit/cmd/pinproxy"},
	Env: []string{"CGO_ENABLED=0"},
}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	if runtime.GOOS != "linux" {
		fmt.Println("skipping: the agent's probe reads Linux /proc and netlink")
		return 0
	}
	defer build.Clean()
	dir, err := build.Run()
	if err != nil {
		fmt.Printf("building the binaries: %v\n", err)
		return 1
	}
	bins = dir
	// A throwaway PostgreSQL cluster for the platform's replicas (the
	// tests needing it skip without it).
	return pgtest.Main(m, &cluster)
}

// cluster is the tests' PostgreSQL cluster; nil without PostgreSQL.
var cluster *pgtest.Cluster

// adminToken is the platform's own token, the admin's, in these tests:
// the GETs that show users' data need it.
const adminToken = "e2e-admin"

// wait is how long any one condition may take to come true; generous, for
// a loaded 2-core box. Conditions are polled, never slept on.
const wait = 20 * time.Second

// proc is one running binary, its log kept for failures.
type proc struct {
	name string
	*testkit.Proc
}

// start runs bins/name with args; the process is stopped (SIGTERM, then
// killed) when the test ends, and its log shown if the test failed.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name}
	t.Cleanup(func() { // runs after the process is stopped
		if t.Failed() {
			t.Logf("%s log:\n%s", p.name, p.output())
		}
	})
	p.Proc = testkit.StartProc(t, exec.Command(filepath.Join(bins, name), args...), nil)
	return p
}

// stop sends SIGTERM and returns the exit status.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(wait):
		t.Fatalf("%s did not stop on SIGTERM", p.name)
	}
	return p.Cmd.ProcessState.ExitCode()
}

func (p *proc) output() string { return p.Log.String() }

// addr waits for the log line with msg and returns its addr= value.
func (p *proc) addr(t *testing.T, msg string) string {
	t.Helper()
	re := regexp.MustCompile(`msg="` + regexp.QuoteMeta(msg) + `".*? addr=(\S+)`)
	var a string
	testkit.WaitFor(t, p.name+" to log "+msg, func() bool {
		select {
		case <-p.Done():
			t.Fatalf("%s exited: %s", p.name, p.output())
		default:
		}
		m := re.FindStringSubmatch(p.output())
		if m != nil {
			a = m[1]
		}
		return m != nil
	})
	return a
}

// count counts the log lines with msg.
func (p *proc) count(msg string) int {
	return strings.Count(p.output(), `msg="`+msg+`"`) + strings.Count(p.output(), "msg="+msg+" ")
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}

// The parts of the platform's answers the test reads.
type (
	admitAnswer struct {
		Admit  bool      `json:"admit"`
		Reason string    `json:"reason"`
		At     time.Time `json:"at"`
		Until  time.Time `json:"until"`
	}
	nodeView struct {
		Overloaded    bool             `json:"overloaded"`
		OverloadEnded time.Time        `json:"overload_ended"`
		LastReading   time.Time        `json:"last_reading"`
		Admitted      bool             `json:"admitted"`
		Reason        string           `json:"reason"`
		Events        []overload.Event `json:"events"`
		Routes        []struct {
			Route routing.Route `json:"route"`
		} `json:"routes"`
		Closed []struct {
			Action routing.Action `json:"action"`
		} `json:"closed"`
	}
)

func (v nodeView) closed() []string {
	var out []string
	for _, c := range v.Closed {
		out = append(out, c.Action.Route.ID+":"+string(c.Action.Reason))
	}
	slices.Sort(out)
	return out
}

func (v nodeView) routes() []string {
	var out []string
	for _, r := range v.Routes {
		out = append(out, r.Route.ID)
	}
	slices.Sort(out)
	return out
}

// coolDown is the platform's cool-down in this test: long enough that the
// test sees it on a loaded box, short enough that the test runs in seconds.
const coolDown = 5 * time.Second

// TestOverloadEndToEnd: the agent reads a fake node, reports every 200 ms
// to the platform; memory goes to 95 %, then back to 40 %. The platform is
// one process on its file store, then two replicas on PostgreSQL: the
// agent reports to the first, the test reads through the second, and both
// run plan rounds.
func TestOverloadEndToEnd(t *testing.T) {
	t.Run("file", func(t *testing.T) { testOverloadEndToEnd(t, "") })
	t.Run("postgres", func(t *testing.T) {
		testOverloadEndToEnd(t, pgtest.Need(t, cluster).NewDatabase(t))
	})
}

// testOverloadEndToEnd runs the test on the file store, or with db on two
// replicas on that database.
func testOverloadEndToEnd(t *testing.T, db string) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "node")
	if err := agenttest.WriteNode(fake, agenttest.Node{MemoryUsedPercent: 40}); err != nil {
		t.Fatal(err)
	}
	// The platform knows its admin's token and node-1's; the agent
	// holds node-1's.
	tokens, agentToken := filepath.Join(dir, "tokens"), filepath.Join(dir, "agent-token")
	if err := os.WriteFile(tokens, []byte(adminToken+"\ne2e-node-1 node-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agentToken, []byte("e2e-node-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The route table. On node-1 (the agent's node, an exit in DE), with
	// the help page's rules: one unused own route is closed at once (the
	// longest unused; the 5 %-an-hour budget allows no second in
	// seconds); the partner route is left; of the routes in use only
	// r-move goes, because its user holds the same route through node-2
	// in DE at a lower price; r-fr's other route is in FR, and r-only is
	// its user's only route.
	now := time.Now().UTC()
	begun := now.Add(-8 * time.Hour)
	rt := func(id, user, node string, kind routing.Kind, idle time.Duration) routing.Route {
		return routing.Route{ID: id, User: user, Key: "vpn", Node: node, Kind: kind, Start: begun, LastTraffic: now.Add(-idle)}
	}
	writeJSONFile(t, filepath.Join(dir, "routes.json"), map[string]any{
		"nodes": []routing.Node{
			{ID: "node-1", Role: routing.RoleExit, Country: "DE", Price: 100},
			{ID: "node-2", Role: routing.RoleExit, Country: "DE", Price: 80},
			{ID: "node-3", Role: routing.RoleExit, Country: "FR", Price: 50},
		},
		"routes": []routing.Route{
			rt("r-idle-5h", "u1", "node-1", routing.KindOwn, 5*time.Hour),
			rt("r-idle-3h", "u2", "node-1", routing.KindOwn, 3*time.Hour),
			rt("r-partner", "u3", "node-1", routing.KindPartner, 6*time.Hour),
			rt("r-move", "u4", "node-1", routing.KindOwn, time.Minute),
			rt("r-move-alt", "u4", "node-2", routing.KindOwn, time.Minute),
			rt("r-fr", "u5", "node-1", routing.KindOwn, time.Minute),
			rt("r-fr-alt", "u5", "node-3", routing.KindOwn, time.Minute),
			rt("r-only", "u6", "node-1", routing.KindOwn, time.Minute),
		},
	})

	// The operator's receiver, verifying and deduplicating with the
	// operator's package.
	hook := newReceiver(t)
	notify := filepath.Join(dir, "notify")
	if err := os.WriteFile(notify, []byte("node-1 "+hook.srv.URL+"/hook "+hookSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	platformArgs := func(listen string) []string {
		store := []string{"-state-dir", filepath.Join(dir, "platform-state")}
		if db != "" {
			store = []string{"-db", db}
		}
		return append([]string{"-listen", listen, "-token-file", tokens, "-routes", filepath.Join(dir, "routes.json"), "-notify-file", notify,
			"-plan-every", "200ms", "-cool-down", coolDown.String(), "-move-after", "1s", "-move-every", "1h"}, store...)
	}
	platform := start(t, "platform", platformArgs("127.0.0.1:0")...)
	listen := platform.addr(t, "platform serving")
	// The agent reports to api; the test reads through api, or, with two
	// replicas, through the second.
	api := "http://" + listen
	if db != "" {
		second := start(t, "platform", platformArgs("127.0.0.1:0")...)
		api = "http://" + second.addr(t, "platform serving")
	}
	reportURL := "http://" + listen + "/report"

	agent := start(t, "proofkit-agent", "-node", "node-1", "-interval", "200ms",
		"-proc", agenttest.Proc(fake), "-sys", agenttest.Sys(fake), "-sysctl", "off", "-listen", "off",
		"-state-dir", filepath.Join(dir, "agent-state"), "-report-url", reportURL, "-token-file", agentToken)

	node := func() nodeView {
		var v nodeView
		getJSON(t, api+"/nodes/node-1", &v)
		return v
	}
	admit := func() admitAnswer {
		var a admitAnswer
		getJSON(t, api+"/admit?node=node-1", &a)
		return a
	}
	notices := func() []overload.Notice {
		var ns []overload.Notice
		getJSON(t, api+"/notices", &ns)
		return ns
	}
	// readingsAfter waits until the platform has counted a reading taken
	// after t0: the agent's latest state has reached it.
	readingsAfter := func(t0 time.Time) {
		testkit.WaitFor(t, "a reading taken after "+t0.Format(time.StampMilli), func() bool { return node().LastReading.After(t0) })
	}

	readingsAfter(time.Time{})
	if a := admit(); !a.Admit {
		t.Fatalf("node-1 at 40 %% memory: %+v, want admitted", a)
	}

	// Memory to 95 %: overloaded after 3 readings (3 of 5).
	if err := agenttest.WriteNode(fake, agenttest.Node{MemoryUsedPercent: 95}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "node-1 overloaded", func() bool { return node().Overloaded })
	if a := admit(); a.Admit || a.Reason != string(routing.ReasonOverloaded) {
		t.Fatalf("overloaded node-1: %+v, want refused, reason overloaded", a)
	}
	if code := post(t, api+"/routes", adminToken, `{"node":"node-1","user":"u7","key":"vpn"}`); code != http.StatusConflict {
		t.Fatalf("a new route through overloaded node-1: status %d, want 409", code)
	}
	if code := post(t, api+"/routes", adminToken, `{"node":"node-2","user":"u7","key":"vpn"}`); code != http.StatusCreated {
		t.Fatalf("a new route through node-2: status %d, want 201", code)
	}
	v := node()
	if len(v.Events) != 1 || v.Events[0].Kind != overload.Start || len(v.Events[0].Findings) != 1 ||
		v.Events[0].Findings[0].Text != "memory at 95 %" {
		t.Fatalf("events %+v, want one start: memory at 95 %%", v.Events)
	}

	// The closures: the longest-unused own route at once, r-move after
	// the overload has lasted a second (memory above 80 %).
	want := []string{"r-idle-5h:unused", "r-move:move"}
	testkit.WaitFor(t, fmt.Sprintf("closures %v", want), func() bool { return slices.Equal(node().closed(), want) })
	// More readings and plan rounds change nothing more, and send no
	// second notice.
	readingsAfter(time.Now().Add(time.Second))
	v = node()
	if got := v.closed(); !slices.Equal(got, want) {
		t.Fatalf("closed %v, want %v", got, want)
	}
	if got, want := v.routes(), []string{"r-fr", "r-idle-3h", "r-only", "r-partner"}; !slices.Equal(got, want) {
		t.Fatalf("routes left on node-1 %v, want %v", got, want)
	}
	ns := notices()
	if len(ns) != 1 || ns[0].Node != "node-1" || ns[0].Text != "node-1 is overloaded: memory at 95 %" {
		t.Fatalf("notices %+v, want exactly one: node-1 is overloaded: memory at 95 %%", ns)
	}
	if n := platform.count("notice"); n != 1 {
		t.Fatalf("platform logged %d notices, want 1", n)
	}

	// A restart of the platform loses nothing: the agent's reports wait
	// in its queue meanwhile, and the node is still overloaded, with the
	// same closures and one notice, when they arrive.
	if code := platform.stop(t); code != 0 {
		t.Fatalf("platform exit status %d on SIGTERM, want 0", code)
	}
	platform = start(t, "platform", platformArgs(listen)...)
	platform.addr(t, "platform serving")
	readingsAfter(time.Now().Add(time.Second))
	v = node()
	if !v.Overloaded || !slices.Equal(v.closed(), want) || len(v.Events) != 1 || len(notices()) != 1 {
		t.Fatalf("after a restart: overloaded %v, closed %v, %d events, %d notices; want true, %v, 1, 1",
			v.Overloaded, v.closed(), len(v.Events), len(notices()), want)
	}
	if n := platform.count("notice"); n != 0 {
		t.Fatalf("restarted platform logged %d notices, want 0", n)
	}

	// Memory back to 40 %: the overload ends, then the cool-down.
	if err := agenttest.WriteNode(fake, agenttest.Node{MemoryUsedPercent: 40}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the overload of node-1 to end", func() bool { return !node().Overloaded })
	a := admit()
	if a.Admit || a.Reason != string(routing.ReasonCoolDown) || a.Until.IsZero() {
		t.Fatalf("right after the overload: %+v, want refused, reason cool-down", a)
	}
	testkit.WaitFor(t, "node-1 to be admitted after the cool-down", func() bool {
		a = admit()
		return a.Admit
	})
	if a.At.Before(a.Until) {
		t.Fatalf("admitted at %v, before the cool-down ended at %v", a.At, a.Until)
	}
	v = node()
	if len(v.Events) != 2 || v.Events[1].Kind != overload.End {
		t.Fatalf("events %+v, want a start and an end", v.Events)
	}
	if n := len(notices()); n != 1 {
		t.Fatalf("%d notices after the end, want 1", n)
	}
	if n := agent.count("node overloaded"); n != 1 {
		t.Fatalf("the agent logged %d overload starts, want 1 (it judges the same readings)", n)
	}
	// The operator's receiver holds the notice, once.
	testkit.WaitFor(t, "the operator's receiver to hold the notice", func() bool { return len(hook.messages()) > 0 })
	if ms := hook.messages(); len(ms) != 1 || ms[0].Type != "node.overloaded" || ms[0].Data.Node != "node-1" ||
		ms[0].Data.Text != "node-1 is overloaded: memory at 95 %" {
		t.Fatalf("the receiver holds %+v, want node-1's notice once", ms)
	}
}

const hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// receiver is the operator's webhook receiver, built on the operator's
// package: it verifies and drops duplicates; it also counts every
// request, and can hold requests (hold) until released.
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	handled  []webhookreceiver.Message
	requests map[string]int // webhook-id → requests
	hold     chan struct{}
	aborted  int // held requests whose sender went away
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{requests: map[string]int{}}
	h := webhookreceiver.Handler([]string{hookSecret}, func(m webhookreceiver.Message) error {
		r.mu.Lock()
		r.handled = append(r.handled, m)
		r.mu.Unlock()
		return nil
	})
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests[req.Header.Get("webhook-id")]++
		hold := r.hold
		r.mu.Unlock()
		// The body read, the server sees the sender go away.
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		if hold != nil {
			select {
			case <-hold:
			case <-req.Context().Done(): // the sender died
				r.mu.Lock()
				r.aborted++
				r.mu.Unlock()
				return
			}
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		r.release()
		r.srv.Close()
	})
	return r
}

func (r *receiver) messages() []webhookreceiver.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.handled)
}

func (r *receiver) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hold != nil {
		close(r.hold)
		r.hold = nil
	}
}

func (r *receiver) requestCount() (ids, requests int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.requests {
		requests += n
	}
	return len(r.requests), requests
}

// TestNotifyReplicaKilled: a replica is SIGKILLed while its delivery of a
// notice is in flight (the receiver holds the request); the other replica
// delivers it once the dead one's claim runs out: the operator's receiver
// holds the notice once, under one id, sent twice.
func TestNotifyReplicaKilled(t *testing.T) {
	db := pgtest.Need(t, cluster).NewDatabase(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hook := newReceiver(t)
	hook.hold = make(chan struct{})
	notify := filepath.Join(dir, "notify")
	if err := os.WriteFile(notify, []byte("* "+hook.srv.URL+"/hook "+hookSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-listen", "127.0.0.1:0", "-token-file", tokens, "-db", db, "-notify-file", notify, "-notify-timeout", "2s"}
	a := start(t, "platform", args...)
	api := "http://" + a.addr(t, "platform serving")
	for i := range 3 {
		r, err := json.Marshal(overload.Reading{Node: "k1", At: time.Now().Add(time.Duration(i-3) * time.Second),
			MemoryUsedPercent: 95, CPUs: 4, ConntrackMax: 262144})
		if err != nil {
			t.Fatal(err)
		}
		if code := post(t, api+"/report", adminToken, string(r)); code != 200 {
			t.Fatalf("reading %d: %d", i, code)
		}
	}
	testkit.WaitFor(t, "the first replica's attempt to reach the receiver", func() bool { _, n := hook.requestCount(); return n == 1 })
	b := start(t, "platform", args...)
	b.addr(t, "platform serving")
	a.Kill()
	testkit.WaitFor(t, "the killed replica's request to end", func() bool {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		return hook.aborted > 0
	})
	hook.release()
	testkit.WaitFor(t, "the second replica to deliver the notice", func() bool { return len(hook.messages()) == 1 })
	ids, requests := hook.requestCount()
	if ms := hook.messages(); ids != 1 || len(ms) != 1 || ms[0].Data.Text != "k1 is overloaded: memory at 95 %" {
		t.Fatalf("%d ids, messages %+v; want k1's notice under one id", ids, ms)
	}
	t.Logf("%d requests for one notice: one from the killed replica, the rest from the other", requests)
	if requests < 2 {
		t.Fatalf("%d requests, want the killed replica's and the other's", requests)
	}
}

func post(t *testing.T, url, token, body string) int {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestPinproxyLeastUsed: pinproxy in front of two nodes sends each new
// client to the node with the fewest live connections.
func TestPinproxyLeastUsed(t *testing.T) {
	// Each node answers a client's line with its name and the line, so a
	// client learns where it landed once bytes went both ways.
	n1 := pinproxytest.New(t, "node-1", pinproxytest.Line)
	n2 := pinproxytest.New(t, "node-2", pinproxytest.Line)
	px := start(t, "pinproxy", "-listen", "127.0.0.1:0", "-upstreams", n1.Addr+","+n2.Addr, "-rebalance-interval", "0")
	addr := px.addr(t, "pinproxy listening")

	_, on := pinproxytest.Dial(t, addr, "a") // stays open until the test ends
	if on != "node-1" {
		t.Fatalf("first client on %s, want node-1 (a tie goes to the first listed)", on)
	}
	b, on := pinproxytest.Dial(t, addr, "b")
	if on != "node-2" {
		t.Fatalf("second client on %s, want node-2, the least used", on)
	}
	b.Conn.Close()
	// Once node-2's connection is gone (the proxy sees the close), the
	// next client goes there again: node-1 still holds one.
	testkit.WaitFor(t, "node-2's connection to close", func() bool {
		c, on := pinproxytest.Dial(t, addr, "c")
		c.Conn.Close()
		return on == "node-2"
	})
}

// TestNotifyFileReload: SIGHUP reloads -notify-file; a bad file is
// refused, naming the line, and the one in force kept.
func TestNotifyFileReload(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hook := newReceiver(t)
	notify := filepath.Join(dir, "notify")
	write := func(s string) {
		if err := os.WriteFile(notify, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("other " + hook.srv.URL + "/hook " + hookSecret + "\n")
	p := start(t, "platform", "-listen", "127.0.0.1:0", "-token-file", tokens, "-state-dir", filepath.Join(dir, "state"), "-notify-file", notify)
	api := "http://" + p.addr(t, "platform serving")
	write("# now every node\n* " + hook.srv.URL + "/hook " + hookSecret + "\n")
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the reload", func() bool { return p.count("notify file reloaded") == 1 })
	write("* " + hook.srv.URL + "/hook not-a-secret\n")
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the bad file refused", func() bool { return p.count("notify file not reloaded") == 1 })
	if !strings.Contains(p.output(), notify+`:1: node *: secret 1`) {
		t.Fatalf("the refusal does not name the line:\n%s", p.output())
	}
	for i := range 3 {
		r, err := json.Marshal(overload.Reading{Node: "r1", At: time.Now().Add(time.Duration(i-3) * time.Second),
			MemoryUsedPercent: 95, CPUs: 4, ConntrackMax: 262144})
		if err != nil {
			t.Fatal(err)
		}
		if code := post(t, api+"/report", adminToken, string(r)); code != 200 {
			t.Fatalf("reading %d: %d", i, code)
		}
	}
	testkit.WaitFor(t, "r1's notice, through the reloaded * line", func() bool { return len(hook.messages()) == 1 })
}
