package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
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

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/proofkit/nodekit/agent"
	"github.com/proofkit/nodekit/agent/agenttest"
	"github.com/proofkit/nodekit/internal/cmdkit"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/sysctl"
)

// bin is the agent binary the tests run, built once in TestMain.
var bin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if runtime.GOOS != "linux" {
		fmt.Println("skipping: the agent's probe reads Linux /proc and netlink")
		return 0
	}
	build := testkit.Build{Pkgs: []string{"."}}
	defer build.Clean()
	dir, err := build.Run()
	if err != nil {
		fmt.Printf("building the agent: %v\n", err)
		return 1
	}
	bin = filepath.Join(dir, "proofkit-agent")
	return m.Run()
}

// node is a fake node tree the agent reads through -proc and -sys.
func node(t *testing.T, n agenttest.Node) string {
	t.Helper()
	dir := t.TempDir()
	if err := agenttest.WriteNode(dir, n); err != nil {
		t.Fatal(err)
	}
	return dir
}

// proc is one running agent, its stdout and stderr in Log.
type proc struct {
	*testkit.Proc
	t    *testing.T
	addr chan string
}

var addrRe = regexp.MustCompile(`msg="serving /, /metrics, /status, /events, /healthz and /readyz" addr=(\S+)`)

// start runs the agent with args on the fake node dir, listening on a free
// loopback port and never touching the real /proc/sys.
func start(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, dir, args...)
}

// startEnv is start with these environment variables added.
func startEnv(t *testing.T, env []string, dir string, args ...string) *proc {
	t.Helper()
	all := append([]string{
		"-proc", agenttest.Proc(dir), "-sys", agenttest.Sys(dir),
		"-listen", "127.0.0.1:0", "-node", "node-1", "-log-level", "debug",
	}, args...)
	cmd := exec.Command(bin, all...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	p := &proc{t: t, addr: make(chan string, 1)}
	t.Cleanup(func() { // after the process ended: testkit.StartProc's cleanup runs first
		if t.Failed() {
			t.Logf("agent log:\n%s", p.log())
		}
	})
	p.Proc = testkit.StartProc(t, cmd, func(line string) {
		if m := addrRe.FindStringSubmatch(line); m != nil {
			select {
			case p.addr <- m[1]:
			default:
			}
		}
	})
	return p
}

func (p *proc) log() string { return p.Log.String() }

func (p *proc) count(msg string) int {
	return strings.Count(p.log(), `msg="`+msg+`"`) + strings.Count(p.log(), "msg="+msg+" ")
}

func (p *proc) url(path string) string {
	p.t.Helper()
	select {
	case a := <-p.addr:
		p.addr <- a
		return "http://" + a + path
	case <-time.After(20 * time.Second):
		p.t.Fatalf("agent did not start listening; stderr:\n%s", p.log())
		return ""
	}
}

// stop sends SIGTERM and returns the exit status.
func (p *proc) stop() int {
	p.t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		p.t.Fatal("agent did not stop on SIGTERM")
	}
	return p.Cmd.ProcessState.ExitCode()
}

// metrics scrapes /metrics, failing the test unless it parses as
// Prometheus text.
func (p *proc) metrics() map[string]*dto.MetricFamily {
	p.t.Helper()
	fams, err := scrape(p.url("/metrics"))
	if err != nil {
		p.t.Fatal(err)
	}
	return fams
}

// scrape reads the metrics served at url, as Prometheus text.
func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("/metrics does not parse: %w", err)
	}
	return fams, nil
}

// getJSON decodes the agent's answer to GET path into v.
func (p *proc) getJSON(path string, v any) {
	p.t.Helper()
	resp, err := http.Get(p.url(path))
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) status() agent.Status {
	p.t.Helper()
	var st agent.Status
	p.getJSON("/status", &st)
	return st
}

// testPlatform accepts readings on a loopback port that it can take down
// (connections refused) and bring back.
type testPlatform struct {
	t     *testing.T
	addr  string
	mu    sync.Mutex
	got   []overload.Reading
	auths []string // each report's Authorization, in order
	ln    net.Listener
	srv   *http.Server
}

func newPlatform(t *testing.T) *testPlatform {
	p := &testPlatform{t: t}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.down)
	return p
}

func (p *testPlatform) serve(ln net.Listener) {
	p.ln = ln
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rd overload.Reading
		if err := json.NewDecoder(r.Body).Decode(&rd); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.got = append(p.got, rd)
		p.auths = append(p.auths, r.Header.Get("Authorization"))
		p.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	})}
	go p.srv.Serve(ln)
}

func (p *testPlatform) down() {
	p.srv.Close()
}

func (p *testPlatform) up() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.serve(ln)
}

func (p *testPlatform) readings() []overload.Reading {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]overload.Reading(nil), p.got...)
}

func (p *testPlatform) authorizations() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.auths...)
}

func tokenFile(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReportSettingsFromTheEnvironment: the packaged unit passes
// -require-report and takes the report URL and the token file from
// /etc/default/proofkit-agent (EnvironmentFile=): with them set there,
// the agent starts and its readings reach the platform.
func TestReportSettingsFromTheEnvironment(t *testing.T) {
	dir := node(t, agenttest.Node{MemoryUsedPercent: 40})
	plat := newPlatform(t)
	a := startEnv(t, []string{
		"PROOFKIT_AGENT_REPORT_URL=http://" + plat.addr + "/readings",
		"PROOFKIT_AGENT_TOKEN_FILE=" + tokenFile(t),
	}, dir, "-require-report", "-sysctl", "off", "-interval", "150ms", "-state-dir", t.TempDir())
	testkit.WaitFor(t, "a reading accepted", func() bool { return len(plat.readings()) >= 1 })
	if code := a.stop(); code != 0 {
		t.Errorf("exit status after SIGTERM = %d, want 0", code)
	}
	if auth := plat.authorizations(); auth[0] != "Bearer tok-123" {
		t.Errorf("Authorization %q, want the token file's", auth[0])
	}
}

// TestReadingsReachThePlatformThroughAnOutage: readings arrive every
// interval; while the platform is down they queue on disk; when it is
// back it receives every one of them once, in order.
func TestReadingsReachThePlatformThroughAnOutage(t *testing.T) {
	dir := node(t, agenttest.Node{MemoryUsedPercent: 40})
	plat := newPlatform(t)
	state := t.TempDir()
	a := start(t, dir, "-sysctl", "off", "-interval", "150ms", "-state-dir", state,
		"-report-url", "http://"+plat.addr+"/readings", "-token-file", tokenFile(t))

	testkit.WaitFor(t, "three readings accepted", func() bool { return len(plat.readings()) >= 3 })
	plat.down()
	before := len(plat.readings())
	testkit.WaitFor(t, "five reports queued while the platform is down", func() bool {
		return a.count("report not delivered; will retry") >= 2 && a.count("reading") >= before+5
	})
	plat.up()
	testkit.WaitFor(t, "the queue drained after the platform came back", func() bool {
		n := len(plat.readings())
		return n > before+5 && n >= a.count("reading")
	})
	if code := a.stop(); code != 0 {
		t.Errorf("exit status after SIGTERM = %d, want 0", code)
	}

	got := plat.readings()
	for i, r := range got {
		if r.Node != "node-1" || r.Version != overload.ReadingVersion || r.MemoryUsedPercent < 39 || r.MemoryUsedPercent > 41 {
			t.Fatalf("reading %d = %+v", i, r)
		}
		if i > 0 && !r.At.After(got[i-1].At) {
			t.Fatalf("reading %d at %v is not after reading %d at %v (duplicate or out of order)", i, r.At, i-1, got[i-1].At)
		}
	}
	// Every reading the agent took reached the platform or is still queued
	// on disk (the one in flight at SIGTERM may be both).
	left, err := os.ReadFile(filepath.Join(state, "reports.jsonl"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	seen := map[time.Time]bool{}
	for _, r := range got {
		seen[r.At] = true
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(left)), "\n") {
		if line == "" {
			continue
		}
		var r overload.Reading
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("queue line %q: %v", line, err)
		}
		seen[r.At] = true
	}
	if total := a.count("reading"); len(seen) != total {
		t.Errorf("the platform received or the queue holds %d distinct readings; the agent took %d", len(seen), total)
	}
	if auths := slices.Compact(slices.Sorted(slices.Values(plat.authorizations()))); !slices.Equal(auths, []string{"Bearer tok-123"}) {
		t.Errorf("Authorization headers = %q, want only Bearer tok-123", auths)
	}
}

// rewrite replaces the file's content the way operators should: a new
// file renamed over the old, so no reader sees half of it.
func rewrite(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestSIGHUPReloadsToken: after the token file is rewritten, SIGHUP makes
// the agent send the new token (the platform here takes both, so nothing
// but the SIGHUP can make it switch) and it runs on; a SIGHUP that finds
// the file empty keeps the token, logs a warning naming the file and the
// reason, and the agent runs on; SIGTERM still stops it with status 0.
func TestSIGHUPReloadsToken(t *testing.T) {
	dir := node(t, agenttest.Node{MemoryUsedPercent: 40})
	plat := newPlatform(t)
	file := tokenFile(t) // tok-123
	a := start(t, dir, "-sysctl", "off", "-interval", "100ms", "-state-dir", t.TempDir(),
		"-report-url", "http://"+plat.addr+"/readings", "-token-file", file)
	running := func(when string) {
		t.Helper()
		select {
		case <-a.Done():
			t.Fatalf("the agent exited %s: %v", when, a.Cmd.ProcessState)
		default:
		}
	}
	hup := func() {
		t.Helper()
		if err := a.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "two reports with the first token", func() bool { return len(plat.authorizations()) >= 2 })

	rewrite(t, file, "tok-456\n")
	hup()
	testkit.WaitFor(t, `"token reloaded"`, func() bool { running("on SIGHUP"); return a.count("token reloaded") == 1 })
	if !strings.Contains(a.log(), "changed=true") {
		t.Errorf(`"token reloaded" does not say changed=true`)
	}
	n := len(plat.authorizations())
	testkit.WaitFor(t, "two reports after the reload", func() bool { return len(plat.authorizations()) >= n+2 })
	running("on SIGHUP")
	auths := plat.authorizations()
	first := slices.Index(auths, "Bearer tok-456")
	if first < 0 || first > n {
		t.Fatalf("Authorization headers %q: want Bearer tok-456 from report %d on", auths, n)
	}
	for i, h := range auths {
		want := "Bearer tok-123"
		if i >= first {
			want = "Bearer tok-456"
		}
		if h != want {
			t.Errorf("report %d carried %q, want %q", i, h, want)
		}
	}

	rewrite(t, file, "")
	hup()
	warn := "token not reloaded; keeping the current one"
	testkit.WaitFor(t, "the warning", func() bool { running("on a SIGHUP that found the file empty"); return a.count(warn) == 1 })
	n = len(plat.authorizations())
	testkit.WaitFor(t, "two reports after the failed reload", func() bool { return len(plat.authorizations()) >= n+2 })
	running("on a SIGHUP that found the file empty")
	for i, h := range plat.authorizations()[n:] {
		if h != "Bearer tok-456" {
			t.Errorf("report %d after the failed reload carried %q, want the token kept", n+i, h)
		}
	}
	for line := range strings.SplitSeq(a.log(), "\n") {
		if strings.Contains(line, warn) && (!strings.Contains(line, "level=WARN") || !strings.Contains(line, "token file "+file+": empty")) {
			t.Errorf("warning %q: want level WARN, naming %s and saying empty", line, file)
		}
	}
	if code := a.stop(); code != 0 {
		t.Errorf("exit status after SIGTERM = %d, want 0", code)
	}
	if strings.Contains(a.log(), "tok-") {
		t.Errorf("the log carries the token:\n%s", a.log())
	}
}

// TestSIGHUPCredentialCopy: under systemd's LoadCredential= the token
// file is a copy made at the service's start, which a rotation of the
// original does not reach; a SIGHUP that finds the same token there says
// so, instead of only "token reloaded".
func TestSIGHUPCredentialCopy(t *testing.T) {
	dir := node(t, agenttest.Node{MemoryUsedPercent: 40})
	plat := newPlatform(t)
	file := tokenFile(t)
	hint := "the token file is a systemd credential, copied when the service started"
	for _, credDir := range []string{filepath.Dir(file), t.TempDir()} {
		a := startEnv(t, []string{"CREDENTIALS_DIRECTORY=" + credDir}, dir, "-sysctl", "off", "-interval", "100ms",
			"-state-dir", t.TempDir(), "-report-url", "http://"+plat.addr+"/readings", "-token-file", file)
		testkit.WaitFor(t, "a report", func() bool { return a.count("reading") >= 1 })
		if err := a.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, `"token reloaded"`, func() bool { return a.count("token reloaded") == 1 })
		if code := a.stop(); code != 0 {
			t.Errorf("exit status after SIGTERM = %d, want 0", code)
		}
		if !strings.Contains(a.log(), "changed=false") {
			t.Errorf("the reload of the same token does not say changed=false")
		}
		inCred := credDir == filepath.Dir(file)
		if got := strings.Contains(a.log(), hint); got != inCred {
			t.Errorf("token file in $CREDENTIALS_DIRECTORY %v: logged the credential hint %v, want %v", inCred, got, inCred)
		}
	}
}

// TestQueueOverflowDropsOldest: with the platform down past the queue's
// bound, the oldest reports are dropped, counted and logged, and the
// newest reach the platform, in order, when it is back.
func TestQueueOverflowDropsOldest(t *testing.T) {
	dir := node(t, agenttest.Node{MemoryUsedPercent: 40})
	plat := newPlatform(t)
	plat.down()
	a := start(t, dir, "-sysctl", "off", "-interval", "100ms", "-state-dir", t.TempDir(), "-queue-max", "3",
		"-report-url", "http://"+plat.addr+"/readings", "-token-file", tokenFile(t))
	testkit.WaitFor(t, "two overflows", func() bool { return a.count("report queue full; dropped the oldest reports") >= 2 })
	plat.up()
	testkit.WaitFor(t, "the queue drained", func() bool {
		n := len(plat.readings())
		return n >= 3 && n+a.count("report queue full; dropped the oldest reports") >= a.count("reading")
	})
	var dropped float64
	for _, m := range a.metrics()["proofkit_agent_reports_dropped_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "reason" && l.GetValue() == "overflow" {
				dropped = m.GetCounter().GetValue()
			}
		}
	}
	if dropped < 2 {
		t.Errorf("reports dropped on overflow = %v, want at least 2", dropped)
	}
	a.stop()
	got := plat.readings()
	for i := 1; i < len(got); i++ {
		if !got[i].At.After(got[i-1].At) {
			t.Fatalf("reading %d is not after reading %d", i, i-1)
		}
	}
}

// TestRestartKeepsOverload: the node is driven into overload by rewriting
// meminfo; after a restart the agent is still overloaded since the same
// time and sends no second notice; the overload then ends.
func TestRestartKeepsOverload(t *testing.T) {
	dir := node(t, agenttest.Node{MemoryUsedPercent: 95})
	state := t.TempDir()
	a := start(t, dir, "-sysctl", "off", "-interval", "100ms", "-state-dir", state)
	var st agent.Status
	testkit.WaitFor(t, "the node overloaded", func() bool { st = a.status(); return st.Overloaded })
	if len(st.Findings) != 1 || st.Findings[0].Check != overload.CheckMemory || st.Findings[0].Text != "memory at 95 %" {
		t.Errorf("findings = %+v, want memory at 95 %%", st.Findings)
	}
	if code := a.stop(); code != 0 {
		t.Errorf("exit status after SIGTERM = %d, want 0", code)
	}
	if n := a.count("overload notice"); n != 1 {
		t.Errorf("first run logged %d notices, want 1", n)
	}

	b := start(t, dir, "-sysctl", "off", "-interval", "100ms", "-state-dir", state)
	st2 := b.status()
	if !st2.Overloaded || !st2.Since.Equal(st.Since) {
		t.Fatalf("after restart: overloaded %v since %v, want since %v", st2.Overloaded, st2.Since, st.Since)
	}
	testkit.WaitFor(t, "three readings after the restart", func() bool { return b.count("reading") >= 3 })
	if n := b.count("overload notice") + b.count("node overloaded"); n != 0 {
		t.Errorf("second run logged %d starts or notices, want none", n)
	}
	if err := agenttest.WriteNode(dir, agenttest.Node{MemoryUsedPercent: 40}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the overload ended", func() bool { return b.count("overload ended") == 1 })
	var ev []overload.Event
	b.getJSON("/events", &ev)
	if len(ev) != 2 || ev[0].Kind != overload.Start || ev[1].Kind != overload.End || !ev[0].At.Equal(st.Since) {
		t.Errorf("/events = %+v, want the start at %v and its end", ev, st.Since)
	}
	if code := b.stop(); code != 0 {
		t.Errorf("exit status after SIGTERM = %d, want 0", code)
	}
}

// TestStateDirLocked: a second agent on a state directory in use exits 1
// at start with one line naming the directory and the running agent's
// pid, and the running one goes on; once it stops, a new one starts.
func TestStateDirLocked(t *testing.T) {
	dir := node(t, agenttest.Node{MemoryUsedPercent: 50})
	state := t.TempDir()
	a := start(t, dir, "-sysctl", "off", "-interval", "100ms", "-state-dir", state)
	testkit.WaitFor(t, "a reading", func() bool { return a.count("reading") >= 1 })

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-proc", agenttest.Proc(dir), "-sys", agenttest.Sys(dir),
		"-sysctl", "off", "-listen", "off", "-node", "node-1", "-state-dir", state)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("second agent: exit status %d (%v), want 1; stderr:\n%s", code, err, stderr.String())
	}
	msg := strings.TrimRight(stderr.String(), "\n")
	want := fmt.Sprintf("proofkit-agent: -state-dir %s: locked by another agent (pid %d)", state, a.Cmd.Process.Pid)
	if msg != want {
		t.Errorf("second agent's stderr = %q, want %q", msg, want)
	}

	n := a.count("reading")
	testkit.WaitFor(t, "the first agent reading on", func() bool { return a.count("reading") > n })
	if code := a.stop(); code != 0 {
		t.Errorf("first agent: exit status after SIGTERM = %d, want 0", code)
	}
	b := start(t, dir, "-sysctl", "off", "-interval", "100ms", "-state-dir", state)
	testkit.WaitFor(t, "a reading after the first agent stopped", func() bool { return b.count("reading") >= 1 })
	if code := b.stop(); code != 0 {
		t.Errorf("exit status after SIGTERM = %d, want 0", code)
	}
}

// TestMetricsParse: /metrics is valid Prometheus text with the node's
// figures under node_exporter's names.
func TestMetricsParse(t *testing.T) {
	dir := node(t, agenttest.Node{MemoryUsedPercent: 50, Load15: 0.25, ConntrackCount: 1000, ConntrackMax: 4096})
	a := start(t, dir, "-sysctl", "off", "-interval", "100ms", "-state-dir", t.TempDir(), "-link-speed", "eth0=1G")
	testkit.WaitFor(t, "two readings", func() bool { return a.count("reading") >= 2 })
	fams := a.metrics()
	for name, want := range map[string]float64{
		"proofkit_agent_nf_conntrack_entries":       1000,
		"proofkit_agent_nf_conntrack_entries_limit": 4096,
		"proofkit_agent_load15":                     0.25,
		"proofkit_agent_memory_used_ratio":          0.5,
		"proofkit_agent_overloaded":                 0,
	} {
		f := fams[name]
		if f == nil || len(f.Metric) != 1 {
			t.Errorf("%s missing", name)
			continue
		}
		if v := f.Metric[0].GetGauge().GetValue(); v < want*0.99 || v > want*1.01 {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if f := fams["proofkit_agent_readings_total"]; f == nil || f.Metric[0].GetCounter().GetValue() < 2 {
		t.Errorf("proofkit_agent_readings_total = %v", f)
	}
	a.stop()
}

// TestOnce: -once prints one valid Reading and exits 0.
func TestOnce(t *testing.T) {
	dir := node(t, agenttest.Node{MemoryUsedPercent: 62.5, Load15: 1.5, ConntrackCount: 10, ConntrackMax: 1000})
	cmd := exec.Command(bin, "-once", "-node", "n-once", "-proc", agenttest.Proc(dir), "-sys", agenttest.Sys(dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("-once: %v\n%s", err, stderr.String())
	}
	var r overload.Reading
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("-once printed %s: %v", out, err)
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("-once printed an invalid reading: %v", err)
	}
	if r.Node != "n-once" || r.MemoryUsedPercent != 62.5 || r.Load15 != 1.5 || r.ConntrackEntries != 10 || r.ConntrackMax != 1000 || r.CPUs < 1 {
		t.Errorf("-once printed %+v", r)
	}
	for _, in := range r.Missing {
		if in == overload.InputListenDrops {
			t.Errorf("listen drops missing in the second reading: %v", r.Notes)
		}
	}
}

// TestUnknownEnv: a PROOFKIT_AGENT_ variable that is no flag's, a typo
// in the settings file, is named, with the one meant where only the
// underscores differ; the flags' own and PROOFKIT_AGENT_VERSION are not.
func TestUnknownEnv(t *testing.T) {
	got := cmdkit.UnknownEnv(flagSet(&options{}), envPrefix, []string{
		"PROOFKIT_AGENT_REPORT_URL=https://p/r", "PROOFKIT_AGENT_LINKSPEED=eth0=1G", "PATH=/bin",
		"PROOFKIT_AGENT_VERSION=v0.5.0", "PROOFKIT_AGENT_TOKEN=abc", "PROOFKIT_AGENT_REQUIRE_REPORT=true",
		"PROOFKIT_AGENT_REPORT__URL=x",
	})
	want := []cmdkit.UnknownVar{
		{Name: "PROOFKIT_AGENT_LINKSPEED", Meant: "PROOFKIT_AGENT_LINK_SPEED"},
		{Name: "PROOFKIT_AGENT_REPORT__URL", Meant: "PROOFKIT_AGENT_REPORT_URL"},
		{Name: "PROOFKIT_AGENT_TOKEN", Meant: ""},
	}
	if !slices.Equal(got, want) {
		t.Errorf("UnknownEnv = %v, want %v", got, want)
	}
}

// TestBadFlags: each bad start exits 2 with one line naming the reason.
func TestBadFlags(t *testing.T) {
	dir := node(t, agenttest.Node{})
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	twoLines := filepath.Join(t.TempDir(), "two-lines")
	if err := os.WriteFile(twoLines, []byte("tok-1\ntok-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(good, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("n", 65)
	report := []string{"-report-url", "http://127.0.0.1:1/r", "-token-file", good}
	roots := []string{"-proc", agenttest.Proc(dir), "-sys", agenttest.Sys(dir), "-sysctl", "off", "-listen", "off"}
	tests := []struct {
		name string
		args []string
		want string
		env  []string
	}{
		{"unknown flag", []string{"-bogus"}, "flag provided but not defined: -bogus", nil},
		{"zero interval", []string{"-interval", "0s"}, "-interval 0s: must be positive", nil},
		{"bad duration", []string{"-interval", "soon"}, `invalid value "soon" for flag -interval: parse error (want a duration such as 30s or 1m30s)`, nil},
		{"sysctl mode", []string{"-sysctl", "maybe"}, `-sysctl "maybe": want apply, file or off`, nil},
		{"log format", []string{"-log-format", "xml"}, `-log-format "xml": want text or json`, nil},
		{"report url without token", []string{"-report-url", "http://127.0.0.1:1/r"}, "-report-url needs -token-file", nil},
		{"report url not http", []string{"-report-url", "ftp://x/r", "-token-file", file}, "want an http:// or https:// URL", nil},
		{"token file missing", []string{"-report-url", "http://127.0.0.1:1/r", "-token-file", filepath.Join(dir, "nope")},
			"token file " + filepath.Join(dir, "nope") + ": no such file or directory", nil},
		{"token file empty", []string{"-report-url", "http://127.0.0.1:1/r", "-token-file", file}, "token file " + file + ": empty", nil},
		{"token file of two lines", []string{"-report-url", "http://127.0.0.1:1/r", "-token-file", twoLines}, "token file " + twoLines + ": more than one line", nil},
		{"state dir unwritable", []string{"-state-dir", filepath.Join(file, "state")}, "-state-dir " + filepath.Join(file, "state") + ": mkdir", nil},
		{"state dir from the environment", nil, "PROOFKIT_AGENT_STATE_DIR (-state-dir) " + filepath.Join(file, "state") + ": mkdir", []string{"PROOFKIT_AGENT_STATE_DIR=" + filepath.Join(file, "state")}},
		{"link speed", []string{"-link-speed", "eth0=fast"}, `-link-speed "eth0=fast"`, nil},
		{"link speed too fast", []string{"-link-speed", "eth0=100000001"}, `-link-speed "eth0=100000001": "eth0=100000001": above 100 Tbit/s`, nil},
		{"link speed that overflows", []string{"-link-speed", "eth0=18446744073709551615G"}, `"eth0=18446744073709551615G": above 100 Tbit/s`, nil},
		{"queue bound", []string{"-queue-max", "0"}, "-queue-max 0: must be 1 or more", nil},
		{"queue bound too large", []string{"-queue-max", "99999999999"}, "-queue-max 99999999999: want 1 to 2880", nil},
		{"interval of a nanosecond", []string{"-interval", "1ns"}, "-interval 1ns: want 100ms to 5m", nil},
		{"interval of 99ms", []string{"-interval", "99ms"}, "-interval 99ms: want 100ms to 5m", nil},
		{"interval over 5m", []string{"-interval", "1000000h"}, "-interval 1000000h0m0s: want 100ms to 5m", nil},
		{"interval from the environment", nil, "PROOFKIT_AGENT_INTERVAL (-interval) 1ms: want 100ms to 5m", []string{"PROOFKIT_AGENT_INTERVAL=1ms"}},
		{"node with a space, standalone", []string{"-node", "exit fra"}, `-node "exit fra": want 1 to 64`, nil},
		{"node not UTF-8, standalone", []string{"-node", "a\xffb"}, `-node "a\xffb": want 1 to 64`, nil},
		{"listen empty", []string{"-listen", ""}, `-listen "": is empty; want host:port, or off for none`, nil},
		{"log level empty in the environment", nil, `PROOFKIT_AGENT_LOG_LEVEL (-log-level) "": want debug, info, warn or error`, []string{"PROOFKIT_AGENT_LOG_LEVEL="}},
		{"proc empty", []string{"-proc", ""}, `-proc "": is empty; want the mount point of a procfs`, nil},
		{"netns a regular file", []string{"-netns", good}, "-netns " + good + ": not a namespace; want a network namespace", nil},
		{"netns of another kind", []string{"-netns", "/proc/self/ns/mnt"}, "-netns /proc/self/ns/mnt: a namespace, but not a network one", nil},
		{"listen address", []string{"-listen", "9464"}, `-listen "9464": want host:port or off`, nil},
		{"argument", []string{"now"}, `unexpected argument "now"`, nil},
		{"value missing", []string{"-node", "-once"}, `-node "-once": a value is missing`, nil},
		{"proc without meminfo", []string{"-proc", dir}, "-proc " + dir + ": no meminfo there", nil},
		{"proc without meminfo, once", []string{"-once", "-proc", dir}, "-proc " + dir + ": no meminfo there", nil},
		{"sys missing", []string{"-sys", filepath.Join(dir, "nope")}, "-sys " + filepath.Join(dir, "nope") + ": not a directory", nil},
		{"netns missing", []string{"-netns", filepath.Join(dir, "nope")}, "-netns " + filepath.Join(dir, "nope"), nil},
		{"netns a FIFO", []string{"-netns", fifo}, "-netns " + fifo + ": " + fifo + " is a named pipe (FIFO), not a regular file; want a network namespace", nil},
		{"netns a directory", []string{"-netns", dir}, "-netns " + dir + ": " + dir + " is a directory, not a regular file; want a network namespace", nil},
		{"listen port", []string{"-listen", "127.0.0.1:99999"}, `-listen "127.0.0.1:99999": want host:port or off`, nil},
		{"token file a FIFO", []string{"-report-url", "http://127.0.0.1:1/r", "-token-file", fifo}, "token file: " + fifo + " is a named pipe (FIFO), not a regular file", nil},
		{"token file a device", []string{"-report-url", "http://127.0.0.1:1/r", "-token-file", "/dev/zero"}, "token file: /dev/zero is a character device, not a regular file", nil},
		{"node too long", append([]string{"-node", long}, report...), `-node "` + long + `": want 1 to 64 of A-Z a-z 0-9 . _ -`, nil},
		{"node with a space", append([]string{"-node", "exit fra"}, report...), `-node "exit fra": want 1 to 64`, nil},
		{"report ca over http", append([]string{"-report-ca", good}, report...), `-report-ca "` + good + `": needs an https:// report URL`, nil},
		{"report ca not PEM", []string{"-report-url", "https://127.0.0.1:1/r", "-token-file", good, "-report-ca", good}, `-report-ca "` + good + `": no PEM certificate in it`, nil},
		{"placeholder report url", []string{"-report-url", "https://platform.example/api/v1/readings", "-token-file", good},
			`-report-url "https://platform.example/api/v1/readings": platform.example is a placeholder from the documentation`, nil},
		{"placeholder under example.com", []string{"-report-url", "https://api.Example.COM./r", "-token-file", good},
			"api.example.com is a placeholder from the documentation", nil},
		{"placeholder with a password", []string{"-report-url", "https://ops:s3cret@platform.example/r", "-token-file", good},
			`-report-url "https://xxxxx@platform.example/r": platform.example is a placeholder`, nil},
		{"report url port out of range", []string{"-report-url", "http://127.0.0.1:99999/r", "-token-file", good},
			`-report-url "http://127.0.0.1:99999/r": port 99999: want 1 to 65535`, nil},
		{"report url port out of range, with a password", []string{"-report-url", "http://ops:s3cret@127.0.0.1:0/r", "-token-file", good},
			`-report-url "http://xxxxx@127.0.0.1:0/r": port 0: want 1 to 65535`, nil},
		{"placeholder under .invalid", []string{"-report-url", "http://platform.invalid:8080/r", "-token-file", good},
			"platform.invalid is a placeholder", nil},
		{"placeholder from the environment", nil,
			`PROOFKIT_AGENT_REPORT_URL (-report-url) "https://platform.example/api/v1/readings": platform.example is a placeholder`,
			[]string{"PROOFKIT_AGENT_REPORT_URL=https://platform.example/api/v1/readings", "PROOFKIT_AGENT_TOKEN_FILE=" + good}},
		{"report required, none given", []string{"-require-report"},
			"no report URL: give -report-url or PROOFKIT_AGENT_REPORT_URL (-require-report is set: this node must report; a packaged install reads the variable from /etc/default/proofkit-agent)", nil},
		{"report required, variable empty", []string{"-require-report"}, "no report URL: give -report-url or PROOFKIT_AGENT_REPORT_URL",
			[]string{"PROOFKIT_AGENT_REPORT_URL=", "PROOFKIT_AGENT_TOKEN_FILE=" + good}},
		{"report required by the environment", nil, "(PROOFKIT_AGENT_REQUIRE_REPORT (-require-report) is set",
			[]string{"PROOFKIT_AGENT_REQUIRE_REPORT=true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A bad flag that slips through starts the agent for good:
			// the deadline turns that into a failure, not a hang.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append(append([]string{}, roots...), tt.args...)...)
			cmd.Env = append(os.Environ(), tt.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := cmd.ProcessState.ExitCode()
			if code != 2 {
				t.Fatalf("exit status %d (%v), want 2; stderr:\n%s", code, err, stderr.String())
			}
			msg := strings.TrimRight(stderr.String(), "\n")
			if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "proofkit-agent: ") || !strings.Contains(msg, tt.want) {
				t.Errorf("stderr = %q, want one line saying %q", msg, tt.want)
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("stderr = %q gives the report URL's password", msg)
			}
		})
	}
}

// TestSysctlOnAFakeTree: -sysctl apply raises the keys of the fake
// /proc/sys (never the real one) and logs each key once; -sysctl file
// leaves them and writes the file instead.
func TestSysctlOnAFakeTree(t *testing.T) {
	for _, mode := range []string{"apply", "file"} {
		t.Run(mode, func(t *testing.T) {
			dir := node(t, agenttest.Node{MemTotalKiB: 16 << 20})
			if err := agenttest.WriteSysctl(dir, agenttest.KernelDefaults()); err != nil {
				t.Fatal(err)
			}
			confDir := t.TempDir()
			a := start(t, dir, "-sysctl", mode, "-sysctl-dir", confDir, "-interval", "5m", "-state-dir", t.TempDir())
			testkit.WaitFor(t, "the first reading", func() bool { return a.count("reading") >= 1 })
			if code := a.stop(); code != 0 {
				t.Errorf("exit status %d", code)
			}
			if n := a.count("sysctl"); n != 9 {
				t.Errorf("logged %d sysctl lines, want one per key (9)", n)
			}
			got, err := agenttest.ReadSysctl(dir, sysctl.KeySomaxconn)
			if err != nil {
				t.Fatal(err)
			}
			_, ferr := os.Stat(filepath.Join(confDir, sysctl.FileName))
			switch mode {
			case "apply":
				if got == "4096" {
					t.Errorf("somaxconn still 4096 after -sysctl apply")
				}
				if ferr == nil {
					t.Errorf("apply on a writable tree left %s", sysctl.FileName)
				}
			case "file":
				if got != "4096" {
					t.Errorf("-sysctl file changed somaxconn to %s", got)
				}
				if ferr != nil {
					t.Errorf("-sysctl file wrote no file: %v", ferr)
				}
				// Told not to set them, it says so: not that it could
				// not (it runs as root, on a writable tree).
				b, _ := os.ReadFile(filepath.Join(confDir, sysctl.FileName))
				if strings.Contains(a.log(), "could not be set") || strings.Contains(string(b), "could not\n# set these kernel values") {
					t.Errorf("-sysctl file says the values could not be set; log:\n%s\nfile:\n%s", a.log(), b)
				}
				if a.count("sysctl: wrote the kernel values to raise to the file, as -sysctl file asks, and set none; to apply them copy the file to /etc/sysctl.d/, run sudo sysctl --system, restart the agent") != 1 {
					t.Errorf("-sysctl file does not say it wrote the file as asked:\n%s", a.log())
				}
			}
		})
	}
}
