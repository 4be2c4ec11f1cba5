package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/buildinfo"
	"github.com/proofkit/nodekit/internal/logbuf"
	"github.com/proofkit/nodekit/internal/testing/deploytest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// -version says the version a release build was given with -ldflags -X.
func TestBinaryVersion(t *testing.T) {
	bin := deploytest.BuildStamped(t, "pinproxy", "v0.5.0", "0123456789abcdef")
	out, err := exec.Command(bin, "-version").Output()
	if err != nil || !strings.HasPrefix(string(out), "pinproxy v0.5.0 (commit 0123456789ab") {
		t.Fatalf("-version: %q, %v", out, err)
	}
}

// The start-up line names the version; the admin port serves the build
// info gauge, /healthz and /readyz; JSON logs carry durations as strings.
func TestBinaryBuildInfoHealthAndJSON(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	p := start(t, nil, "-upstreams", a.Addr, "-admin", "127.0.0.1:0", "-log-format", "json")
	var line map[string]any
	for _, l := range p.log() {
		if strings.Contains(l, `"msg":"pinproxy listening"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line["version"] == nil || line["version"] == "" || line["rebalance_interval"] != "1m0s" || line["dial_timeout"] != "5s" {
		t.Fatalf("start-up line %v: want a version and durations as strings", line)
	}
	if m := get(t, "http://"+p.admin+"/metrics"); !strings.Contains(m, `pinproxy_build_info{commit=`) {
		t.Errorf("/metrics lacks pinproxy_build_info:\n%s", m)
	}
	if got := get(t, "http://"+p.admin+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
	if got := get(t, "http://"+p.admin+"/readyz"); got != "ok\n" {
		t.Errorf("/readyz = %q", got)
	}
}

// /readyz says 503 while the checks find no upstream up.
func TestBinaryNotReady(t *testing.T) {
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	p := start(t, nil, "-upstreams", b.Addr, "-admin", "127.0.0.1:0", "-check-interval", "50ms", "-check-fall", "1")
	// /readyz says 503 from the start (no check has answered yet); wait
	// for the first check to find B down too, which on a loaded machine
	// may come later.
	testkit.WaitFor(t, "the checks to find B down", func() bool {
		var status struct{ Upstreams []pinproxy.UpstreamStats }
		json.Unmarshal([]byte(get(t, "http://"+p.admin+"/status")), &status)
		return len(status.Upstreams) == 1 && status.Upstreams[0].State == "down"
	})
	resp, err := http.Get("http://" + p.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "no upstream up") {
		t.Fatalf("/readyz with B down: %s %q, want 503 saying no upstream is up", resp.Status, body)
	}
}

// The admin server closes slow and idle connections itself.
func TestAdminServerTimeouts(t *testing.T) {
	p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{"a:1"}})
	if err != nil {
		t.Fatal(err)
	}
	s := newAdminServer(p, buildinfo.Read(), slog.New(slog.DiscardHandler), logbuf.New(io.Discard, logbuf.Config{}))
	if s.ReadHeaderTimeout <= 0 || s.IdleTimeout <= 0 || s.IdleTimeout > 2*time.Minute || s.MaxHeaderBytes <= 0 || s.WriteTimeout <= 0 {
		t.Fatalf("admin server: read header %v, idle %v, max header %d, write %v",
			s.ReadHeaderTimeout, s.IdleTimeout, s.MaxHeaderBytes, s.WriteTimeout)
	}
}

// The start-up line's paths are the ones the admin server answers.
func TestAdminPathsListed(t *testing.T) {
	p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{"a:1"}})
	if err != nil {
		t.Fatal(err)
	}
	s := newAdminServer(p, buildinfo.Read(), slog.New(slog.DiscardHandler), logbuf.New(io.Discard, logbuf.Config{}))
	if got, want := strings.Join(s.paths, " "), "/metrics /status /healthz /readyz"; got != want {
		t.Errorf("paths %q, want %q", got, want)
	}
	for _, path := range append(s.paths, "/nothing-here") {
		rec := httptest.NewRecorder()
		s.Handler.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if notFound := rec.Code == http.StatusNotFound; notFound != (path == "/nothing-here") {
			t.Errorf("GET %s: %d", path, rec.Code)
		}
	}
}

// SIGHUP re-reads -upstreams-file: the added upstream takes the next
// client, the removed one keeps its live connection; a bad file keeps the
// list and names the line; without a file SIGHUP is logged and ignored.
func TestBinaryReload(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	file := filepath.Join(t.TempDir(), "upstreams")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("# the nodes\n" + a.Addr + "\n")
	p := start(t, nil, "-upstreams-file", file)
	old, on := pinproxytest.Dial(t, p.addr, "old")
	if on != "A" {
		t.Fatalf("old landed on %s", on)
	}
	write(a.Addr + "\nbad host:1\n")
	p.Cmd.Process.Signal(syscall.SIGHUP)
	p.waitLines(func(l []string) bool {
		return count(l, `msg="reload failed; keeping the current upstreams"`) == 1 && count(l, `line 2: \"bad host:1\": host has a space in it`) == 1
	})
	write(b.Addr + "\n")
	p.Cmd.Process.Signal(syscall.SIGHUP)
	p.waitLines(func(l []string) bool { return count(l, `msg="upstreams set"`) == 1 })
	if _, on := pinproxytest.Dial(t, p.addr, "new"); on != "B" {
		t.Fatalf("new client landed on %s after the reload, want B", on)
	}
	if on, err := old.Ping(); err != nil || on != "A" {
		t.Fatalf("old client after the reload: %q, %v; want still on A", on, err)
	}

	q := start(t, nil, "-upstreams", a.Addr)
	q.Cmd.Process.Signal(syscall.SIGHUP)
	q.waitLines(func(l []string) bool { return count(l, "SIGHUP without -upstreams-file") == 1 })
	if _, on := pinproxytest.Dial(t, q.addr, "c"); on != "A" {
		t.Fatal("the proxy stopped serving after SIGHUP")
	}
}

// A second SIGTERM during the drain closes the connections at once.
func TestBinarySecondSignalStopsDrain(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	p := start(t, nil, "-upstreams", a.Addr, "-shutdown-timeout", "10m")
	cl, _ := pinproxytest.Dial(t, p.addr, "c")
	p.Cmd.Process.Signal(syscall.SIGTERM)
	p.waitLines(func(l []string) bool { return count(l, "signal received; draining") == 1 })
	if on, err := cl.Ping(); err != nil || on != "A" {
		t.Fatalf("during the drain: %q, %v", on, err)
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	if !cl.Closed() {
		t.Fatal("the second SIGTERM left the connection open")
	}
	if code := p.exit(); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	if n := count(p.log(), `reason=drained`); n != 1 {
		t.Fatalf("%d connection lines with reason=drained, want 1", n)
	}
}

// Each connection's end is logged at info level, unless -log-connections=false.
func TestBinaryConnectionLog(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	for _, on := range []bool{true, false} {
		// With -log-connections=false the line is at debug level: the
		// test logs at debug to see it come, and checks it is not at info.
		level := map[bool]string{true: "info", false: "debug"}[on]
		p := start(t, nil, "-upstreams", a.Addr, "-log-level", level, fmt.Sprintf("-log-connections=%v", on))
		cl, _ := pinproxytest.Dial(t, p.addr, "c")
		cl.Conn.Close()
		if on {
			p.waitLines(func(l []string) bool {
				for _, s := range l {
					if strings.Contains(s, `msg="connection ended"`) && strings.Contains(s, "upstream="+a.Addr) &&
						strings.Contains(s, "duration=") && strings.Contains(s, "bytes_sent=") && strings.Contains(s, "reason=") {
						return true
					}
				}
				return false
			})
			continue
		}
		p.waitLines(func(l []string) bool { return count(l, `level=DEBUG msg="connection ended"`) == 1 })
		if n := count(p.log(), `level=INFO msg="connection ended"`); n != 0 {
			t.Fatalf("-log-connections=false logged %d connection lines at info level", n)
		}
	}
}

// With an open-file limit of 200 the default -max-conns follows it:
// clients over the cap are refused before the proxy runs out, no
// upstream is blamed, and the admin port still answers. With -max-conns 0
// the proxy runs out of descriptors, and still blames no upstream and
// logs the local errors at most once a second.
func TestBinaryFileLimit(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Echo)
	for _, explicit := range []bool{false, true} {
		args := []string{"-listen", "127.0.0.1:0", "-upstreams", a.Addr, "-admin", "127.0.0.1:0", "-log-connections=false"}
		if explicit {
			args = append(args, "-max-conns", "0")
		}
		p := startShell(t, "ulimit -n 200 && exec "+binary+" "+strings.Join(args, " "))
		if !explicit {
			p.waitLines(func(l []string) bool { return count(l, `max_conns=84 max_conns_from="RLIMIT_NOFILE 200"`) == 1 })
		}
		start := time.Now()
		var conns []net.Conn
		for range 150 {
			c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
			if err != nil {
				continue
			}
			conns = append(conns, c)
			t.Cleanup(func() { c.Close() })
		}
		var status struct {
			Upstreams []pinproxy.UpstreamStats
			Totals    pinproxy.Totals
		}
		var body string
		if explicit { // out of descriptors, the admin port cannot accept either
			time.Sleep(500 * time.Millisecond)
			for _, c := range conns {
				c.Close()
			}
		}
		// The proxy takes the clients at its own pace on a loaded machine:
		// wait for the verdict (rejections at the cap; local errors
		// without one) rather than for a fixed time.
		testkit.WaitFor(t, "the proxy to have taken the 150 clients", func() bool {
			body = get(t, "http://"+p.admin+"/status")
			if err := json.Unmarshal([]byte(body), &status); err != nil {
				t.Fatal(err)
			}
			if explicit {
				return status.Totals.LocalErrors > 0 || count(p.log(), "for want of local resources") > 0
			}
			return status.Totals.Rejected > 0
		})
		took := time.Since(start)
		t.Logf("explicit=%v: %s", explicit, strings.Join(strings.Fields(body), " "))
		u := status.Upstreams[0]
		if u.Failures != 0 || u.State == "down" {
			t.Fatalf("explicit=%v: the upstream was blamed for local errors: %s", explicit, body)
		}
		if !explicit && (status.Totals.Rejected == 0 || status.Totals.Live > 84) {
			t.Fatalf("at the cap: %s, want clients rejected and at most 84 live", body)
		}
		if explicit {
			if n, most := count(p.log(), "for want of local resources"), 2+int(took.Seconds()); n > most {
				t.Fatalf("%d lines of local errors in %v, want at most one a second", n, took)
			}
		}
		for _, c := range conns {
			c.Close()
		}
	}
}

// startShell runs the binary through sh -c script, as start runs it.
func startShell(t *testing.T, script string) *proc {
	t.Helper()
	return launch(t, exec.Command("sh", "-c", script))
}

// The byte counters on /metrics move while a connection lives, by
// upstream and direction, as rate(pinproxy_upstream_bytes_total[1m])
// needs for a connection that lives for days.
func TestBinaryLiveByteCounters(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Echo)
	p := start(t, nil, "-upstreams", a.Addr, "-admin", "127.0.0.1:0")
	c, err := net.DialTimeout("tcp", p.addr, pinproxytest.WaitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	const n = 65536
	if _, err := c.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	// The connection is still open: the figures must be there already.
	for _, dir := range []string{"sent", "received"} {
		want := fmt.Sprintf(`pinproxy_upstream_bytes_total{direction=%q,upstream=%q} %d`, dir, a.Addr, n)
		testkit.WaitFor(t, want, func() bool {
			return strings.Contains(get(t, "http://"+p.admin+"/metrics"), want+"\n")
		})
	}
}

// PINPROXY_VERSION, which deployments use for the release to run, is not
// read as -version: the proxy serves instead of printing a line and
// exiting 0, or refusing "v0.5.0" as a bool.
func TestBinaryVersionNotFromEnvironment(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	for _, v := range []string{"true", "v0.5.0"} {
		p := start(t, []string{"PINPROXY_VERSION=" + v}, "-upstreams", a.Addr)
		if _, on := pinproxytest.Dial(t, p.addr, "c-"+v); on != "A" {
			t.Fatalf("PINPROXY_VERSION=%s: client landed on %q", v, on)
		}
	}
}

// A -max-conns beyond what the open-file limit allows is taken, and the
// start-up says so with the figure that fits.
func TestBinaryMaxConnsOverFileLimit(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Echo)
	p := startShell(t, "ulimit -n 200 && exec "+binary+" -listen 127.0.0.1:0 -upstreams "+a.Addr+" -max-conns 1000")
	p.waitLines(func(l []string) bool {
		return count(l, `-max-conns is more than the open-file limit allows`) == 1 && count(l, `max_conns=1000 rlimit_nofile=200 fits=84`) == 1
	})
}
