package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// bins builds the pinproxy command once; binary is its path, set by
// TestMain.
var (
	bins   = testkit.Build{Pkgs: []string{"."}}
	binary string
)

// moreBuilds are other builds some tests share, removed by TestMain.
var moreBuilds []*testkit.Build

func TestMain(m *testing.M) {
	dir, err := bins.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		bins.Clean()
		os.Exit(1)
	}
	binary = filepath.Join(dir, "pinproxy")
	code := m.Run()
	bins.Clean()
	for _, b := range moreBuilds {
		b.Clean()
	}
	os.Exit(code)
}

// proc is a running pinproxy binary.
type proc struct {
	*testkit.Proc
	t     *testing.T
	addr  string // where it accepts clients
	admin string // where it serves /metrics and /status, if asked

	mu    sync.Mutex
	lines []string
	grew  chan struct{} // closed and replaced when a line arrives
}

var addrRE = regexp.MustCompile(`msg="(pinproxy|admin) listening" addr=(\S+)|"msg":"(pinproxy|admin) listening","addr":"([^"]+)"`)

// start runs the binary on a free loopback port, with args and env, and
// waits until it listens. The process is killed at cleanup if still running.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	args = append([]string{"-listen", "127.0.0.1:0", "-log-level", "debug"}, args...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	return launch(t, cmd)
}

// launch starts cmd, a pinproxy binary, and waits until it listens.
func launch(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{t: t, grew: make(chan struct{})}
	p.Proc = testkit.StartProc(t, cmd, func(line string) {
		p.mu.Lock()
		p.lines = append(p.lines, line)
		close(p.grew)
		p.grew = make(chan struct{})
		p.mu.Unlock()
	})
	// Runs before StartProc's cleanup: a kill, not a drain of up to
	// -shutdown-timeout.
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("pinproxy's log:\n%s", p.Log.String())
		}
	})
	p.waitLines(func(lines []string) bool {
		for _, l := range lines {
			if m := addrRE.FindStringSubmatch(l); m != nil {
				who, addr := m[1]+m[3], m[2]+m[4]
				if who == "pinproxy" {
					p.addr = addr
				} else {
					p.admin = addr
				}
			}
		}
		return p.addr != ""
	})
	return p
}

func (p *proc) log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// waitLines waits until cond holds for the log so far.
func (p *proc) waitLines(cond func([]string) bool) {
	p.t.Helper()
	deadline := time.After(pinproxytest.WaitFor)
	for {
		p.mu.Lock()
		lines, grew := append([]string(nil), p.lines...), p.grew
		p.mu.Unlock()
		if cond(lines) {
			return
		}
		select {
		case <-grew:
		case <-p.Done():
			p.t.Fatalf("pinproxy exited (%v) while the test waited for its log", p.Cmd.ProcessState)
		case <-deadline:
			p.t.Fatal("pinproxy's log did not show what the test waited for")
		}
	}
}

// count returns how many log lines contain s.
func count(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// waitRounds waits until n more log lines contain s.
func (p *proc) waitRounds(s string, n int) {
	p.t.Helper()
	base := count(p.log(), s)
	p.waitLines(func(lines []string) bool { return count(lines, s) >= base+n })
}

// exit waits for the process to end and returns its exit status.
func (p *proc) exit() int {
	p.t.Helper()
	select {
	case <-p.Done():
	case <-time.After(pinproxytest.WaitFor):
		p.t.Fatal("pinproxy did not exit")
	}
	if p.Cmd.ProcessState == nil {
		p.t.Fatal("pinproxy: no exit status")
	}
	return p.Cmd.ProcessState.ExitCode()
}

const (
	evenRound  = `msg="rebalance: spread is even; nothing to do"`
	downRound  = `msg="idle node still does not answer; nothing moved"`
	movedRound = `msg="answers again; moving a connection"`
)

// The pull request's first case, through the binary: B is down, so both clients
// land on A; rounds change nothing while B is down; once B answers, the
// newer connection is closed and its redial lands on B; then the spread is
// even and rounds make no connection.
func TestBinarySeedMovesNewerConnectionOnceNodeAnswers(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	p := start(t, nil, "-upstreams", a.Addr+","+b.Addr, "-rebalance-interval", "200ms", "-dial-timeout", "2s")

	older, on1 := pinproxytest.Dial(t, p.addr, "older")
	newer, on2 := pinproxytest.Dial(t, p.addr, "newer")
	if on1 != "A" || on2 != "A" {
		t.Fatalf("clients landed on %s and %s while B is down, want A and A", on1, on2)
	}
	p.waitRounds(downRound, 2)
	for _, cl := range []*pinproxytest.Client{older, newer} {
		if on, err := cl.Ping(); err != nil || on != "A" {
			t.Fatalf("client %s after rounds with B down: on %q, %v", cl.ID, on, err)
		}
	}
	if n := count(p.log(), movedRound); n != 0 {
		t.Fatalf("%d moves while B was down", n)
	}

	b.Start()
	if !newer.Closed() {
		t.Fatal("the newer connection was not closed once B answered")
	}
	want := fmt.Sprintf(`%s from=%s to=%s`, movedRound, a.Addr, b.Addr)
	p.waitLines(func(l []string) bool { return count(l, want) == 1 }) // the log may trail the close
	if on := newer.Redial(); on != "B" {
		t.Fatalf("redial landed on %s, want B", on)
	}
	if on, err := older.Ping(); err != nil || on != "A" {
		t.Fatalf("older client: on %q, %v; want still on A", on, err)
	}

	acceptsA, acceptsB := a.Accepts.Load(), b.Accepts.Load()
	p.waitRounds(evenRound, 3)
	if a.Accepts.Load() != acceptsA || b.Accepts.Load() != acceptsB {
		t.Errorf("rounds with an even spread connected: A %d→%d, B %d→%d",
			acceptsA, a.Accepts.Load(), acceptsB, b.Accepts.Load())
	}
	if n := count(p.log(), movedRound); n != 1 {
		t.Errorf("%d moves in all, want 1", n)
	}
}

// The pull request's second case, through the binary: with one connection per
// node, rounds leave everything alone and make no connection.
func TestBinarySeedLeavesEvenSpreadAlone(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	p := start(t, []string{"PINPROXY_UPSTREAMS=" + a.Addr + "," + b.Addr, "PINPROXY_REBALANCE_INTERVAL=200ms"})

	c1, on1 := pinproxytest.Dial(t, p.addr, "c1")
	c2, on2 := pinproxytest.Dial(t, p.addr, "c2")
	if on1 != "A" || on2 != "B" {
		t.Fatalf("clients landed on %s and %s, want A and B", on1, on2)
	}
	acceptsA, acceptsB := a.Accepts.Load(), b.Accepts.Load()
	p.waitRounds(evenRound, 3)
	if a.Accepts.Load() != acceptsA || b.Accepts.Load() != acceptsB {
		t.Errorf("rounds connected: A %d→%d, B %d→%d", acceptsA, a.Accepts.Load(), acceptsB, b.Accepts.Load())
	}
	for _, cl := range []*pinproxytest.Client{c1, c2} {
		if _, err := cl.Ping(); err != nil {
			t.Errorf("client %s: %v", cl.ID, err)
		}
	}
	if n := count(p.log(), movedRound) + count(p.log(), downRound); n != 0 {
		t.Errorf("%d rounds acted on an even spread", n)
	}
}

// SIGTERM drains: the live connection keeps working until the client
// closes it, then the process exits 0.
func TestBinarySIGTERMDrains(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	p := start(t, nil, "-upstreams", a.Addr)
	cl, _ := pinproxytest.Dial(t, p.addr, "c")
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLines(func(l []string) bool { return count(l, "signal received; draining") == 1 })
	if on, err := cl.Ping(); err != nil || on != "A" {
		t.Fatalf("live connection during the drain: %q, %v", on, err)
	}
	cl.Conn.Close()
	if code := p.exit(); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0", code)
	}
}

// When the drain takes longer than -shutdown-timeout, the connections left
// are closed, and the exit status is still 0.
func TestBinarySIGTERMClosesAfterTimeout(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	p := start(t, nil, "-upstreams", a.Addr, "-shutdown-timeout", "100ms")
	cl, _ := pinproxytest.Dial(t, p.addr, "c")
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !cl.Closed() {
		t.Fatal("the live connection was not closed after -shutdown-timeout")
	}
	if code := p.exit(); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}

// -admin serves /status (JSON) and /metrics (Prometheus).
func TestBinaryAdmin(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	p := start(t, nil, "-upstreams", a.Addr+","+b.Addr, "-admin", "127.0.0.1:0", "-log-format", "text")
	if p.admin == "" { // logged before "pinproxy listening"
		t.Fatal("no admin address in the log")
	}
	pinproxytest.Dial(t, p.addr, "c1")
	pinproxytest.Dial(t, p.addr, "c2")

	var status struct {
		Upstreams []pinproxy.UpstreamStats `json:"upstreams"`
		Totals    pinproxy.Totals          `json:"totals"`
	}
	body := get(t, "http://"+p.admin+"/status")
	if err := json.Unmarshal([]byte(body), &status); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	if len(status.Upstreams) != 2 || status.Upstreams[0].Live != 2 || status.Upstreams[1].Live != 0 ||
		status.Upstreams[1].Answered || status.Upstreams[1].Failures != 1 || status.Totals.Live != 2 {
		t.Errorf("/status = %s", body)
	}
	metrics := get(t, "http://"+p.admin+"/metrics")
	for _, want := range []string{
		fmt.Sprintf(`pinproxy_upstream_live_connections{upstream="%s"} 2`, a.Addr),
		fmt.Sprintf(`pinproxy_upstream_up{upstream="%s"} 0`, b.Addr),
		fmt.Sprintf(`pinproxy_upstream_dial_failures_total{upstream="%s"} 1`, b.Addr),
		"pinproxy_rebalance_moves_total 0",
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(metrics, "go_goroutines") {
		t.Error("/metrics serves the global registry's Go metrics; want a registry of its own")
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: pinproxytest.WaitFor}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(b)
}

// Bad flags, environment values and addresses: exit status 2 and one line
// on stderr that says what was wrong.
func TestBinaryUsageErrors(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ok := []string{"-listen", "127.0.0.1:0", "-upstreams", "127.0.0.1:9"}
	badFile := filepath.Join(t.TempDir(), "upstreams")
	if err := os.WriteFile(badFile, []byte("eu-01:9333\n# usa next\nusa-01\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Files that would block or never end: each is refused at once.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"fifo file", nil, []string{"-listen", "127.0.0.1:0", "-upstreams-file", fifo}, "-upstreams-file: " + fifo + " is a named pipe (FIFO), not a regular file"},
		{"device file", nil, []string{"-listen", "127.0.0.1:0", "-upstreams-file", "/dev/zero"}, "-upstreams-file: /dev/zero is a character device, not a regular file"},
		{"huge file", nil, []string{"-listen", "127.0.0.1:0", "-upstreams-file", big}, "-upstreams-file: " + big + " is over 1048576 bytes"},
		{"fifo check", nil, append(ok, "-check-expect", "@"+fifo), "-check-expect: " + fifo + " is a named pipe (FIFO), not a regular file"},
		{"device check", nil, append(ok, "-check-send", "@/dev/zero", "-check-expect", "00"), "-check-send: /dev/zero is a character device, not a regular file"},
		{"huge check", nil, append(ok, "-check-expect", "@"+big), "-check-expect: " + big + " is over 65536 bytes"},
		{"unknown flag", nil, append(ok, "-frobnicate"), "flag provided but not defined: -frobnicate"},
		{"no upstreams", nil, []string{"-listen", "127.0.0.1:0"}, "-upstreams is required"},
		{"no listen", nil, []string{"-upstreams", "a:1"}, "-listen is required"},
		{"bad upstream", nil, []string{"-listen", "127.0.0.1:0", "-upstreams", "a:1,usa-01"}, `upstream 2 "usa-01": missing port`},
		{"bad upstream port", nil, []string{"-listen", "127.0.0.1:0", "-upstreams", "a:99999"}, `upstream 1 "a:99999": port "99999"`},
		{"empty upstream", nil, []string{"-listen", "127.0.0.1:0", "-upstreams", "a:1,,b:2"}, "entry 2 is empty"},
		{"bad duration", nil, append(ok, "-rebalance-interval", "60"), `invalid value "60" for flag -rebalance-interval: parse error (want a duration`},
		{"negative interval", nil, append(ok, "-rebalance-interval", "-1m"), "-rebalance-interval -1m0s: must not be negative"},
		{"zero dial timeout", nil, append(ok, "-dial-timeout", "0s"), "-dial-timeout 0s: must be positive"},
		{"bad max conns", nil, append(ok, "-max-conns", "-1"), "-max-conns -1"},
		{"bad log format", nil, append(ok, "-log-format", "xml"), `-log-format "xml": want text or json`},
		{"listen taken", nil, []string{"-listen", taken.Addr().String(), "-upstreams", "a:1"}, "-listen: cannot listen on " + taken.Addr().String()},
		{"bad listen", nil, []string{"-listen", "localhost", "-upstreams", "a:1"}, `-listen "localhost": want host:port`},
		{"admin taken", nil, append(ok, "-admin", taken.Addr().String()), "-admin: cannot listen on " + taken.Addr().String()},
		{"bad env", []string{"PINPROXY_DIAL_TIMEOUT=5"}, ok, `PINPROXY_DIAL_TIMEOUT="5": parse error (want a duration`},
		{"env upstream", []string{"PINPROXY_UPSTREAMS=nope"}, []string{"-listen", "127.0.0.1:0"}, `PINPROXY_UPSTREAMS (-upstreams): upstream 1 "nope": missing port`},
		{"env max conns", []string{"PINPROXY_MAX_CONNS=-1"}, ok, "PINPROXY_MAX_CONNS (-max-conns) -1: must not be negative"},
		{"env listen", []string{"PINPROXY_LISTEN=localhost"}, []string{"-upstreams", "a:1"}, `PINPROXY_LISTEN (-listen) "localhost": want host:port`},
		{"env file", []string{"PINPROXY_UPSTREAMS_FILE=" + badFile}, []string{"-listen", "127.0.0.1:0"}, "PINPROXY_UPSTREAMS_FILE (-upstreams-file) " + badFile + `: line 3: "usa-01": missing port`},
		{"flag not env", []string{"PINPROXY_MAX_CONNS=5"}, append(ok, "-max-conns", "-1"), "pinproxy: -max-conns -1: must not be negative"},
		{"stray argument", nil, append(ok, "extra"), `unexpected argument "extra"`},
		{"space in host", nil, []string{"-listen", "127.0.0.1:0", "-upstreams", "eu 01:9333"}, `upstream 1 "eu 01:9333": host has a space in it`},
		{"both lists", nil, append(ok, "-upstreams-file", badFile), "give one, not both"},
		{"bad file", nil, []string{"-listen", "127.0.0.1:0", "-upstreams-file", badFile}, `-upstreams-file ` + badFile + `: line 3: "usa-01": missing port`},
		{"no file", nil, []string{"-listen", "127.0.0.1:0", "-upstreams-file", badFile + ".none"}, "-upstreams-file: open " + badFile + ".none: no such file"},
		{"bad send-proxy", nil, append(ok, "-send-proxy", "v3"), `-send-proxy "v3": want v1 or v2`},
		{"bad max moves", nil, append(ok, "-rebalance-max-moves", "0"), "-rebalance-max-moves 0: must be at least 1"},
		{"bad check fall", nil, append(ok, "-check-fall", "0"), "-check-fall 0: must be at least 1"},
		{"bad check hex", nil, append(ok, "-check-expect", "f9be zz"), `-check-expect "f9be zz": want hex digits or @FILE: encoding/hex: invalid byte`},
		{"no check file", nil, append(ok, "-check-send", "@"+badFile+".none", "-check-expect", "00"), "-check-send: open " + badFile + ".none: no such file"},
		{"send without expect", nil, append(ok, "-check-send", "0a0b"), `-check-send "0a0b": needs -check-expect`},
		{"bad refused sessions", nil, append(ok, "-refused-sessions", "0"), "-refused-sessions 0: must be at least 1"},
		{"negative refused within", nil, append(ok, "-refused-within", "-1s"), "-refused-within -1s: must not be negative"},
		{"bad bool env", []string{"PINPROXY_LOG_CONNECTIONS=maybe"}, ok, `PINPROXY_LOG_CONNECTIONS="maybe": parse error (want true or false)`},
	}
	if runtime.GOOS == "linux" {
		tests = append(tests, []struct {
			name string
			env  []string
			args []string
			want string
		}{
			// The one line: PINPROXY_HANDOFF_FD is not warned about as a
			// variable that names no flag (every upgraded process has it).
			{"bad handoff fd", []string{"PINPROXY_HANDOFF_FD=x"}, ok, `PINPROXY_HANDOFF_FD="x": want a descriptor number`},
			{"no upgrade socket dir", nil, append(ok, "-upgrade-socket", filepath.Join(t.TempDir(), "none", "up.sock")), "-upgrade-socket: handover: socket "},
		}...)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(binary, tt.args...)
			cmd.Env = append(os.Environ(), tt.env...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(pinproxytest.WaitFor):
				cmd.Process.Kill()
				<-done
				t.Fatal("pinproxy started instead of refusing")
			}
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
				t.Errorf("exit: %v, want status 2", err)
			}
			got := stderr.String()
			if strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, "pinproxy: ") || !strings.Contains(got, tt.want) {
				t.Errorf("stderr %q, want one line with %q", got, tt.want)
			}
		})
	}
}

// Flags win over the environment.
func TestFlagsOverrideEnvironment(t *testing.T) {
	env := map[string]string{
		"PINPROXY_LISTEN":             "127.0.0.1:1",
		"PINPROXY_UPSTREAMS":          "env:1",
		"PINPROXY_REBALANCE_INTERVAL": "0",
		"PINPROXY_MAX_CONNS":          "7",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	o, err := parseFlags([]string{"-upstreams", "flag:1,flag:2", "-max-conns", "3"}, lookup, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.listen != "127.0.0.1:1" || strings.Join(o.upstreams, ",") != "flag:1,flag:2" || o.maxConns != 3 || o.rebalanceInterval != 0 {
		t.Errorf("options %+v", o)
	}
	if cfg := o.config(nil); cfg.RebalanceInterval >= 0 {
		t.Errorf("-rebalance-interval 0 became RebalanceInterval %v, want negative (off)", cfg.RebalanceInterval)
	}
}

// The -upstreams list never panics the parser or New, and what they accept
// is a list of trimmed, non-empty entries.
func FuzzUpstreamsFlag(f *testing.F) {
	for _, s := range []string{"a:1", "a:1,b:2", " a:1 , b:2 ", "a:1,,b:2", ",", "", "[::1]:9333,eu-01:9333", "a:1,a:1"} {
		f.Add(s)
	}
	noEnv := func(string) (string, bool) { return "", false }
	f.Fuzz(func(t *testing.T, list string) {
		o, err := parseFlags([]string{"-listen", "127.0.0.1:0", "-upstreams", list}, noEnv, io.Discard)
		if err != nil {
			if _, ok := err.(usageError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		for _, u := range o.upstreams {
			if u == "" || strings.TrimSpace(u) != u || strings.Contains(u, ",") {
				t.Fatalf("entry %q from %q", u, list)
			}
		}
		pinproxy.New(o.config(nil))
	})
}

// -park-after reaches the proxy's Config; 0 is refused rather than read as
// the library's "default".
func TestParkAfterFlag(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	base := []string{"-listen", "127.0.0.1:0", "-upstreams", "a:1"}
	o, err := parseFlags(base, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := o.config(nil); cfg.ParkAfter != pinproxy.DefaultParkAfter {
		t.Errorf("default ParkAfter %v, want %v", cfg.ParkAfter, pinproxy.DefaultParkAfter)
	}
	o, err = parseFlags(append(base, "-park-after", "-1s"), noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := o.config(nil); cfg.ParkAfter >= 0 {
		t.Errorf("-park-after -1s became ParkAfter %v, want negative (never)", cfg.ParkAfter)
	}
	for _, never := range []string{"-1", "never", "-5"} {
		o, err = parseFlags(append(base, "-park-after", never), noEnv, io.Discard)
		if err != nil {
			t.Fatalf("-park-after %s: %v", never, err)
		}
		if cfg := o.config(nil); cfg.ParkAfter >= 0 {
			t.Errorf("-park-after %s became ParkAfter %v, want negative (never)", never, cfg.ParkAfter)
		}
	}
	if _, err := parseFlags(append(base, "-park-after", "soon"), noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "want a duration") {
		t.Errorf("-park-after soon: err %v, want one saying it wants a duration", err)
	}
	if _, err := parseFlags(append(base, "-park-after", "0"), noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "-park-after 0") {
		t.Errorf("-park-after 0: err %v, want one naming the flag", err)
	}
}

// -max-dial-attempts reaches the proxy's Config; 0 is refused.
func TestMaxDialAttemptsFlag(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	base := []string{"-listen", "127.0.0.1:0", "-upstreams", "a:1"}
	for arg, want := range map[string]int{"": pinproxy.DefaultMaxDialAttempts, "5": 5, "-1": -1} {
		args := base
		if arg != "" {
			args = append(args, "-max-dial-attempts", arg)
		}
		o, err := parseFlags(args, noEnv, io.Discard)
		if err != nil {
			t.Fatalf("-max-dial-attempts %q: %v", arg, err)
		}
		if got := o.config(nil).MaxDialAttempts; got != want {
			t.Errorf("-max-dial-attempts %q: MaxDialAttempts %d, want %d", arg, got, want)
		}
	}
	if _, err := parseFlags(append(base, "-max-dial-attempts", "0"), noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "-max-dial-attempts 0") {
		t.Errorf("-max-dial-attempts 0: err %v, want one naming the flag", err)
	}
}

// -check-send and -check-expect take hex (spaces ignored) or @FILE, and
// reach the Config with the refused-session flags; -refused-within 0
// turns the detection off rather than meaning the library's default.
func TestCheckAndRefusedFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "version.bin")
	if err := os.WriteFile(file, []byte{0xf9, 0xbe, 0xb4, 0xd9, 'v'}, 0o644); err != nil {
		t.Fatal(err)
	}
	noEnv := func(string) (string, bool) { return "", false }
	o, err := parseFlags([]string{"-listen", "127.0.0.1:0", "-upstreams", "a:1",
		"-check-send", "@" + file, "-check-expect", "f9be b4d9", "-check-timeout", "3s",
		"-refused-within", "0", "-refused-bytes", "100", "-refused-sessions", "5"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.config(nil)
	if string(cfg.CheckSend) != "\xf9\xbe\xb4\xd9v" || string(cfg.CheckExpect) != "\xf9\xbe\xb4\xd9" || cfg.CheckTimeout != 3*time.Second {
		t.Errorf("check: send %x, expect %x, timeout %v", cfg.CheckSend, cfg.CheckExpect, cfg.CheckTimeout)
	}
	if cfg.RefusedWithin >= 0 || cfg.RefusedBytes != 100 || cfg.RefusedSessions != 5 {
		t.Errorf("refused: within %v (want negative: off), bytes %d, sessions %d", cfg.RefusedWithin, cfg.RefusedBytes, cfg.RefusedSessions)
	}
	if _, err := pinproxy.New(cfg); err != nil {
		t.Errorf("New: %v", err)
	}
}
