package agent_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/agent/agenttest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// The agent binary the tests run, built once, on first use, with the
// test clock (cmd/proofkit-agent/testclock.go).
var agentBuild = testkit.Build{
	Pkgs:  []string{"github.com/proofkit/nodekit/cmd/proofkit-agent"},
	Flags: []string{"-tags", "proofkit_testclock"},
}

func TestMain(m *testing.M) {
	code := m.Run()
	agentBuild.Clean()
	os.Exit(code)
}

func buildAgent(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("skipping: the agent's probe reads Linux /proc and netlink")
	}
	return agentBuild.Bin(t, "proofkit-agent")
}

// faultPlatform is a platform on a real loopback socket that follows the
// report protocol (overload.ReadingVersion 2: duplicates by run and seq,
// a new run's at moved after the last) while its mode is "ok", and
// otherwise answers every report with that mode's fault.
type faultPlatform struct {
	t    *testing.T
	addr string
	srv  *http.Server

	mu       sync.Mutex
	mode     string
	changed  chan struct{} // closed when mode changes
	ln       net.Listener  // nil while the platform is gone
	tracker  *overload.Tracker
	counted  []overload.Reading // counted readings, in order, at as observed
	verdicts []verdict
	count    map[runSeq]int
	lastRun  string
	lastSeq  uint64
	lastAt   time.Time
	dups     int
	answers  map[string]int // mode -> requests answered in it
	followed int            // requests to the redirect target
}

type runSeq struct {
	run string
	seq uint64
}

type verdict struct {
	overloaded bool
	event      string
}

func newFaultPlatform(t *testing.T) *faultPlatform {
	p := &faultPlatform{
		t: t, mode: "ok", changed: make(chan struct{}),
		tracker: overload.NewTracker("n1", overload.Limits{}),
		count:   make(map[runSeq]int), answers: make(map[string]int),
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.ln = ln
	go p.srv.Serve(ln)
	t.Cleanup(func() { p.setMode("ok"); p.srv.Close() })
	return p
}

// setMode switches the platform's answer. "gone" closes the listening
// socket (connections are refused) until the next mode opens it again on
// the same port.
func (p *faultPlatform) setMode(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if mode == p.mode {
		return
	}
	p.mode = mode
	close(p.changed)
	p.changed = make(chan struct{})
	if mode == "gone" && p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	if mode != "gone" && p.ln == nil {
		for i := 0; ; i++ {
			ln, err := net.Listen("tcp", p.addr)
			if err == nil {
				p.ln = ln
				go p.srv.Serve(ln)
				break
			}
			if i == 100 {
				p.t.Errorf("platform cannot listen again on %s: %v", p.addr, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (p *faultPlatform) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	p.mu.Lock()
	if r.URL.Path == "/elsewhere" {
		p.followed++
		p.mu.Unlock()
		return
	}
	mode, changed := p.mode, p.changed
	p.answers[mode]++
	p.mu.Unlock()
	refuse := func(status int, reason string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error": "refused in mode %s", "reason": %q}`, mode, reason)
	}
	if mode == "older" || mode == "invalid" || mode == "unauthorized" {
		// A platform answers a reading it counted already as such
		// before it judges it.
		var r overload.Reading
		if json.Unmarshal(body, &r) == nil && p.duplicate(r) {
			fmt.Fprint(w, `{"duplicate": true}`)
			return
		}
	}
	switch mode {
	case "ok":
		p.observe(w, body)
	case "redirect":
		w.Header().Set("Location", "/elsewhere")
		w.WriteHeader(http.StatusFound)
	case "older":
		refuse(http.StatusConflict, "older")
	case "invalid":
		refuse(http.StatusBadRequest, "invalid")
	case "unauthorized":
		refuse(http.StatusUnauthorized, "unauthorized")
	case "busy":
		http.Error(w, "busy", http.StatusServiceUnavailable)
	case "hang": // no answer until the mode changes; then the connection just ends
		select {
		case <-changed:
		case <-r.Context().Done():
		}
		resetConn(w)
	default: // "reset", and "gone" for a connection made before
		resetConn(w)
	}
}

// resetConn ends the request's connection with a TCP reset.
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

func (p *faultPlatform) duplicate(r overload.Reading) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Run == p.lastRun && r.Seq <= p.lastSeq {
		p.dups++
		return true
	}
	return false
}

// observe is the platform's side of the protocol for one report.
func (p *faultPlatform) observe(w http.ResponseWriter, body []byte) {
	var r overload.Reading
	if err := json.Unmarshal(body, &r); err != nil || r.Run == "" || r.Seq == 0 {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error": "not a version 2 reading", "reason": "invalid"}`)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Run == p.lastRun && r.Seq <= p.lastSeq {
		p.dups++
		fmt.Fprint(w, `{"duplicate": true}`)
		return
	}
	if !r.At.After(p.lastAt) && !p.lastAt.IsZero() { // as overload.Tracker counts it
		r.At = p.lastAt.Add(time.Second)
	}
	res, err := p.tracker.Observe(r)
	if err != nil {
		p.t.Errorf("platform tracker refused run %s seq %d: %v", r.Run, r.Seq, err)
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprintf(w, `{"error": %q, "reason": "invalid"}`, err.Error())
		return
	}
	p.lastRun, p.lastSeq, p.lastAt = r.Run, r.Seq, r.At
	p.count[runSeq{r.Run, r.Seq}]++
	p.counted = append(p.counted, r)
	p.verdicts = append(p.verdicts, verdictOf(res))
	w.WriteHeader(http.StatusAccepted)
}

func verdictOf(res overload.Result) verdict {
	v := verdict{overloaded: res.Overloaded}
	if res.Event != nil {
		v.event = string(res.Event.Kind)
	}
	return v
}

// agentProc is one run of the agent binary.
type agentProc struct {
	*testkit.Proc
	addr chan string
}

var faultAddrRe = regexp.MustCompile(`msg="serving /, /metrics, /status, /events, /healthz and /readyz" addr=(\S+)`)

func startAgent(t *testing.T, bin string, env []string, args ...string) *agentProc {
	t.Helper()
	a := &agentProc{addr: make(chan string, 1)}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	a.Proc = testkit.StartProc(t, cmd, func(line string) {
		if m := faultAddrRe.FindStringSubmatch(line); m != nil {
			a.addr <- m[1]
		}
	})
	return a
}

// scrape returns the value of each series of the agent's /metrics whose
// name starts with prefix, keyed by the series as written.
func (a *agentProc) scrape(t *testing.T, prefix string) map[string]float64 {
	t.Helper()
	var addr string
	select {
	case addr = <-a.addr:
		a.addr <- addr
	case <-time.After(10 * time.Second):
		t.Fatalf("the agent serves no /metrics:\n%s", a.Log.String())
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

var (
	takenRe    = regexp.MustCompile(`msg=reading run=(\w+) seq=(\d+) at=(\S+)`)
	refusedRe  = regexp.MustCompile(`msg="platform refused a report; dropped it" reason=(\w+) .* run=(\w+) seq=(\d+)`)
	overflowRe = regexp.MustCompile(`msg="report queue (?:full|held more than its bound); dropped the oldest[^"]*" .* reason=overflow run=(\w+) seqs=([\d,]+)`)
)

// TestFaultInjection runs the built agent against a platform that answers
// every class in turn (2xx, 3xx, 409, other 4xx, 401, 5xx, hangs, resets,
// goes away for a while), kills it with SIGKILL at random points and
// steps its wall clock, and checks the invariant: every reading taken is
// counted once by the platform, or still queued on disk, or named in the
// log (and the last run's metrics) as dropped with its reason; none is
// counted twice; no seq of a run is left out (some agents kill themselves
// between queuing a report and saving its seq, through the test build's
// hook); and the platform's verdicts equal those of a tracker fed the same
// readings in order.
//
// The clock is stepped through the binary's test clock (built with -tags
// proofkit_testclock; see cmd/proofkit-agent/testclock.go): the agent's
// wall clock and its readings' times are shifted by what the test writes
// in a file, since the host's clock is not the test's to step. Interval
// 200 ms, so a 4 s outage stands for 10 minutes at the default 30 s.
func TestFaultInjection(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: the fault suite runs for about 40 s")
	}
	bin := buildAgent(t)
	dir := t.TempDir()
	nodeDir := filepath.Join(dir, "node")
	stateDir := filepath.Join(dir, "state")
	clockFile := filepath.Join(dir, "clock")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := agenttest.WriteNode(nodeDir, agenttest.Node{MemoryUsedPercent: 40}); err != nil {
		t.Fatal(err)
	}
	// As root the state directory is a real tmpfs that the calm part
	// fills for a while; elsewhere that part runs with room.
	disk := newFullDisk(t, stateDir)
	p := newFaultPlatform(t)
	env := []string{"PROOFKIT_AGENT_TEST_CLOCK_FILE=" + clockFile}
	args := []string{
		"-proc", agenttest.Proc(nodeDir), "-sys", agenttest.Sys(nodeDir), "-sysctl", "off",
		"-listen", "127.0.0.1:0", "-node", "n1", "-log-level", "debug",
		"-interval", "200ms", "-queue-max", "30", "-state-dir", stateDir,
		"-report-url", "http://" + p.addr + "/readings", "-token-file", tokenFile,
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("NK_FAULT_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("NK_FAULT_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (NK_FAULT_SEED=%d replays its kills and restarts; their timing is the machine's)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 42))

	type phase struct {
		mode  string
		secs  float64
		clock string // "" leaves the clock as it is
		mem   float64
		full  bool // the state directory's disk is full
	}
	// Kills happen during the first part; the last part, with no kill,
	// ends in one agent whose metrics are checked against its log.
	killing := []phase{
		{"ok", 1.5, "", 40, false}, {"redirect", 1, "", 95, false}, {"ok", 1, "290s", 95, false}, {"older", 0.6, "", 95, false},
		{"ok", 1, "", 40, false}, {"invalid", 0.6, "", 40, false}, {"busy", 1.5, "-1h", 40, false}, {"ok", 1, "", 95, false},
		{"hang", 2, "", 95, false}, {"ok", 1, "", 95, false}, {"reset", 1, "", 40, false}, {"ok", 1, "0s", 40, false},
		{"gone", 8, "", 95, false}, {"ok", 1.5, "", 95, false}, {"unauthorized", 1, "", 40, false}, {"ok", 1, "-30m", 40, false},
	}
	calm := []phase{
		{"ok", 1, "", 95, true}, {"gone", 1, "", 95, true}, {"ok", 1, "", 40, true},
		{"older", 0.6, "", 95, false}, {"ok", 1, "", 95, false}, {"invalid", 0.6, "0s", 95, false}, {"redirect", 0.6, "", 40, false},
		{"gone", 8, "", 40, false}, {"ok", 3, "", 40, false}, {"gone", 1, "", 40, false}, // some stay queued
	}

	var procs []*agentProc
	cur := startAgent(t, bin, env, args...)
	procs = append(procs, cur)
	kills, steps := 0, 0
	// killAndRestart SIGKILLs the agent and starts another on its state.
	// Every other agent of the killing part is also set to kill itself
	// between queuing a report and saving its seq (the test build's hook),
	// a few readings after the last one its predecessor logged.
	selfKills := 0
	killAndRestart := func() {
		cur.Kill()
		kills++
		next := env
		if kills%2 == 1 {
			var last uint64
			if m := takenRe.FindAllStringSubmatch(cur.Log.String(), -1); len(m) > 0 {
				last, _ = strconv.ParseUint(m[len(m)-1][2], 10, 64)
			}
			next = append(slices.Clone(env), fmt.Sprintf("PROOFKIT_AGENT_TEST_KILL=between:%d", last+1+uint64(rng.IntN(3))))
			selfKills++
		}
		cur = startAgent(t, bin, next, args...)
		procs = append(procs, cur)
	}
	run := func(ph phase, kill bool) {
		disk.set(ph.full)
		p.setMode(ph.mode)
		if ph.clock != "" {
			steps++
			if err := os.WriteFile(clockFile, []byte(ph.clock), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := agenttest.WriteNode(nodeDir, agenttest.Node{MemoryUsedPercent: ph.mem}); err != nil {
			t.Fatal(err)
		}
		end := time.Now().Add(time.Duration(ph.secs * float64(time.Second)))
		for time.Now().Before(end) {
			nap := 500 * time.Millisecond
			if ph.full { // top up what the agent's writes freed
				disk.set(true)
				nap = 100 * time.Millisecond
			}
			if !kill || rng.IntN(4) != 0 {
				time.Sleep(min(time.Until(end), nap))
				continue
			}
			// SIGKILL at a random point, then start again.
			time.Sleep(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
			killAndRestart()
		}
	}
	for _, ph := range killing {
		run(ph, true)
	}
	// The last agent sees the calm part from its start, with no hook.
	cur.Kill()
	kills++
	cur = startAgent(t, bin, env, args...)
	procs = append(procs, cur)
	for _, ph := range calm {
		run(ph, false)
	}
	last := cur.scrape(t, "proofkit_agent_")
	cur.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-cur.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the agent did not stop on SIGTERM")
	}

	// On a failure the agents' logs are left to read.
	defer func() {
		if t.Failed() {
			saveAgentLogs(t, procs)
		}
	}()

	// What each reading became.
	taken := make(map[runSeq]bool)
	dropped := make(map[runSeq]string)
	var logs strings.Builder
	for _, a := range procs {
		logs.WriteString(a.Log.String())
	}
	all := logs.String()
	if strings.Contains(all, "s3cret-token") {
		t.Error("the token is in the agent's log")
	}
	// A run and seq name one reading, even where a restart went on from a
	// state saved before a full disk.
	takenAt := make(map[runSeq]string)
	for _, m := range takenRe.FindAllStringSubmatch(all, -1) {
		seq, _ := strconv.ParseUint(m[2], 10, 64)
		k := runSeq{m[1], seq}
		if at, ok := takenAt[k]; ok && at != m[3] {
			t.Errorf("run %s seq %d names two readings, at %s and at %s", k.run, k.seq, at, m[3])
		}
		takenAt[k] = m[3]
		taken[k] = true
	}
	for _, m := range refusedRe.FindAllStringSubmatch(all, -1) {
		seq, _ := strconv.ParseUint(m[3], 10, 64)
		dropped[runSeq{m[2], seq}] = m[1]
	}
	for _, m := range overflowRe.FindAllStringSubmatch(all, -1) {
		for _, s := range strings.Split(m[2], ",") {
			seq, _ := strconv.ParseUint(s, 10, 64)
			dropped[runSeq{m[1], seq}] = "overflow"
		}
	}
	queued := make(map[runSeq]bool)
	b, _ := os.ReadFile(filepath.Join(stateDir, "reports.jsonl"))
	for line := range bytes.SplitSeq(bytes.TrimSpace(b), []byte("\n")) {
		var r overload.Reading
		if len(line) > 0 && json.Unmarshal(line, &r) == nil {
			queued[runSeq{r.Run, r.Seq}] = true
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.count {
		taken[k] = true
	}
	for k := range queued {
		taken[k] = true
	}
	byReason := make(map[string]int)
	var delivered, onDisk, lost int
	for k := range taken {
		n, why, q := p.count[k], dropped[k], queued[k]
		switch {
		case n > 1:
			t.Errorf("run %s seq %d counted %d times", k.run, k.seq, n)
		case n == 1 && why != "":
			t.Errorf("run %s seq %d counted and also logged as dropped (%s)", k.run, k.seq, why)
		case n == 1:
			delivered++
		case why != "":
			byReason[why]++
		case q:
			onDisk++
		default:
			lost++
			t.Errorf("run %s seq %d was taken but is neither counted, queued nor named as dropped", k.run, k.seq)
		}
	}
	// No seq left out: within a run every seq from 1 to the highest
	// is a reading accounted for above (a kill between queuing a report
	// and saving its seq, or mid-append, must not leave one out).
	highest := make(map[string]uint64)
	for k := range taken {
		highest[k.run] = max(highest[k.run], k.seq)
	}
	for run, top := range highest {
		for seq := uint64(1); seq <= top; seq++ {
			if k := (runSeq{run, seq}); !taken[k] && dropped[k] == "" {
				t.Errorf("run %s: seq %d is missing (the run goes up to %d): a reading numbered and never reported", run, seq, top)
			}
		}
	}
	if p.followed > 0 {
		t.Errorf("the agent followed a redirect %d times", p.followed)
	}

	// The same readings, in order, through a tracker of our own.
	ref := overload.NewTracker("n1", overload.Limits{})
	order := slices.Clone(p.counted)
	runOrder := make(map[string]int)
	for _, r := range p.counted {
		if _, ok := runOrder[r.Run]; !ok {
			runOrder[r.Run] = len(runOrder)
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].Run != order[j].Run {
			return runOrder[order[i].Run] < runOrder[order[j].Run]
		}
		return order[i].Seq < order[j].Seq
	})
	overloadedReadings := 0
	for i, r := range order {
		res, err := ref.Observe(r)
		if err != nil {
			t.Fatalf("reference tracker: reading %d (run %s seq %d): %v", i, r.Run, r.Seq, err)
		}
		if got := verdictOf(res); got != p.verdicts[i] {
			t.Errorf("reading %d (run %s seq %d): platform's verdict %+v, the tracker's %+v", i, r.Run, r.Seq, p.verdicts[i], got)
		}
		if res.Overloaded {
			overloadedReadings++
		}
	}

	// The last agent's metrics say what its log says.
	lastLog := cur.Log.String()
	for _, reason := range []string{"older", "invalid"} {
		logged := strings.Count(lastLog, `msg="platform refused a report; dropped it" reason=`+reason)
		if got := last[`proofkit_agent_reports_refused_total{reason="`+reason+`"}`]; got != float64(logged) {
			t.Errorf("last agent: refused{%s} = %v, its log names %d", reason, got, logged)
		}
	}
	loggedOverflow := 0
	for _, m := range overflowRe.FindAllStringSubmatch(lastLog, -1) {
		loggedOverflow += len(strings.Split(m[2], ","))
	}
	if got := last[`proofkit_agent_reports_dropped_total{reason="overflow"}`]; got != float64(loggedOverflow) {
		t.Errorf("last agent: dropped{overflow} = %v, its log names %d", got, loggedOverflow)
	}
	if byReason["overflow"] == 0 || byReason["older"] == 0 || byReason["invalid"] == 0 || onDisk == 0 {
		t.Errorf("the run exercised too little: dropped by reason %v", byReason)
	}
	if n := strings.Count(all, "reports delivered again after "); n == 0 {
		t.Error("no line said that delivery recovered")
	}
	runs := len(runOrder)
	t.Logf("tally: taken %d, delivered %d (platform acknowledged %d duplicates), queued %d, dropped %v, unaccounted %d; "+
		"%d agents (%d SIGKILLs, %d set to kill themselves between queue and save), %d clock steps, %d runs, %d readings overloaded, disk filled %v; answers by mode %v",
		len(taken), delivered, p.dups, onDisk, byReason, lost, len(procs), kills, selfKills, steps, runs, overloadedReadings, disk.filled, p.answers)
	fmt.Printf("fault injection tally: taken %d, delivered %d, queued %d, dropped %v (duplicates acknowledged %d; %d SIGKILLs, %d clock steps)\n",
		len(taken), delivered, onDisk, byReason, p.dups, kills, steps)
}

// saveAgentLogs writes the log of each agent of procs, in order, to the
// test's artifact directory (testkit.ArtifactDir).
func saveAgentLogs(t *testing.T, procs []*agentProc) {
	dir := testkit.ArtifactDir(t)
	var all strings.Builder
	for i, a := range procs {
		fmt.Fprintf(&all, "=== agent %d of %d\n%s", i+1, len(procs), a.Log.String())
	}
	path := filepath.Join(dir, "agents.log")
	if err := os.WriteFile(path, []byte(all.String()), 0o644); err != nil {
		t.Logf("agents' logs not saved: %v", err)
		return
	}
	t.Logf("the %d agents' logs are in %s", len(procs), path)
}

// fullDisk is a state directory on a real tmpfs (as root) that set fills
// and empties again; without root, or where no tmpfs mounts, set does
// nothing.
type fullDisk struct {
	t      *testing.T
	filler string // "" without a tmpfs
	filled bool   // set(true) filled it at least once
}

func newFullDisk(t *testing.T, dir string) *fullDisk {
	d := &fullDisk{t: t}
	if os.Geteuid() != 0 {
		t.Log("not root: the state directory is not a tmpfs, and the disk never fills")
		return d
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := testkit.MountTmpfs(t, dir, "1m"); err != nil {
		t.Logf("no tmpfs (%v): the disk never fills", err)
		return d
	}
	d.filler = filepath.Join(dir, "filler")
	return d
}

// set fills the disk to the last byte (full), or removes what filled it.
func (d *fullDisk) set(full bool) {
	if d.filler == "" {
		return
	}
	if !full {
		if err := os.Remove(d.filler); err != nil && !os.IsNotExist(err) {
			d.t.Fatal(err)
		}
		return
	}
	if err := testkit.FillDisk(d.filler); err != nil {
		d.t.Fatal(err)
	}
	d.filled = true
}

// TestSIGTERMWithABlockedProbe: a /proc file that blocks (a FIFO in place
// of loadavg) holds a reading for ever; SIGTERM still stops the agent
// within a second (the test allows three, for a loaded machine).
func TestSIGTERMWithABlockedProbe(t *testing.T) {
	bin := buildAgent(t)
	dir := t.TempDir()
	if err := agenttest.WriteNode(dir, agenttest.Node{MemoryUsedPercent: 40}); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, bin, nil, "-proc", agenttest.Proc(dir), "-sys", agenttest.Sys(dir), "-sysctl", "off",
		"-listen", "127.0.0.1:0", "-node", "n1", "-log-level", "debug", "-interval", "100ms",
		"-state-dir", filepath.Join(dir, "state"))
	testkit.WaitFor(t, "a first reading", func() bool { return strings.Contains(a.Log.String(), "msg=reading ") })
	loadavg := filepath.Join(agenttest.Proc(dir), "loadavg")
	if err := os.Remove(loadavg); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(loadavg, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a reading is now blocked on the FIFO
	start := time.Now()
	a.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.Done():
	case <-time.After(3 * time.Second):
		t.Fatalf("the agent did not stop within 3 s of SIGTERM with a blocked probe:\n%s", a.Log.String())
	}
	t.Logf("stopped %v after SIGTERM, exit status %d", time.Since(start).Round(time.Millisecond), a.Cmd.ProcessState.ExitCode())
}

// TestStartupRedactsTheReportURL: the report URL's user and password are
// not in the binary's log, and its warnings say what is wrong.
func TestStartupRedactsTheReportURL(t *testing.T) {
	bin := buildAgent(t)
	dir := t.TempDir()
	if err := agenttest.WriteNode(dir, agenttest.Node{MemoryUsedPercent: 40}); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, bin, nil, "-proc", agenttest.Proc(dir), "-sys", agenttest.Sys(dir), "-sysctl", "off",
		"-listen", "off", "-node", "n1", "-state-dir", filepath.Join(dir, "state"),
		"-report-url", "http://joe:hunter2@192.0.2.1:9/readings", "-token-file", tokenFile)
	testkit.WaitFor(t, "the start-up line", func() bool { return strings.Contains(a.Log.String(), `msg="agent started"`) })
	a.Kill()
	out := a.Log.String()
	for _, secret := range []string{"hunter2", "joe", "s3cret-token"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q is in the log:\n%s", secret, out)
		}
	}
	for _, want := range []string{"report_url=http://xxxxx@192.0.2.1:9/readings", "can be read by other users", "plain http"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// TestKillBetweenQueueAndSave kills the agent with SIGKILL in the Step of
// seq 3, between its two writes (the report to the queue, the seq to the
// state), through the test build's hook (PROOFKIT_AGENT_TEST_KILL; see
// testkill_testclock.go), starts it again on its state, and checks that
// the run's seqs reach the platform with no gap and none twice.
func TestKillBetweenQueueAndSave(t *testing.T) {
	bin := buildAgent(t)
	dir := t.TempDir()
	nodeDir := filepath.Join(dir, "node")
	stateDir := filepath.Join(dir, "state")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := agenttest.WriteNode(nodeDir, agenttest.Node{MemoryUsedPercent: 40}); err != nil {
		t.Fatal(err)
	}
	p := newFaultPlatform(t)
	args := []string{
		"-proc", agenttest.Proc(nodeDir), "-sys", agenttest.Sys(nodeDir), "-sysctl", "off",
		"-listen", "127.0.0.1:0", "-node", "n1", "-log-level", "debug",
		"-interval", "200ms", "-state-dir", stateDir,
		"-report-url", "http://" + p.addr + "/readings", "-token-file", tokenFile,
	}
	first := startAgent(t, bin, []string{"PROOFKIT_AGENT_TEST_KILL=between:3"}, args...)
	select {
	case <-first.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent was not killed at seq 3:\n%s", first.Log.String())
	}
	second := startAgent(t, bin, nil, args...)
	defer second.Kill()
	counted := func() (run string, seqs []uint64) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, r := range p.counted {
			if run == "" {
				run = r.Run
			}
			if r.Run == run {
				seqs = append(seqs, r.Seq)
			}
		}
		return run, seqs
	}
	testkit.WaitForWithin(t, 30*time.Second, "the platform counts seq 6 of the first run", func() bool {
		_, seqs := counted()
		return len(seqs) > 0 && seqs[len(seqs)-1] >= 6
	})
	run, seqs := counted()
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("run %s: the platform counted seqs %v, want 1, 2, 3, … with no gap\nfirst agent:\n%s\nsecond agent:\n%s",
				run, seqs, first.Log.String(), second.Log.String())
		}
	}
}
