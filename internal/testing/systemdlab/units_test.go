//go:build linux

package systemdlab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/dockerlab"
	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// root is the module's root, from this package.
const root = "../../.."

// Two versions, so that an upgrade installs a new binary.
const (
	v1 = "v0.0.1-systemdlab"
	v2 = "v0.0.2-systemdlab"
)

// debs builds the release's packages for this machine's architecture
// with go run ./internal/tools/release, as a release does, and returns
// the directory holding them.
func debs(t *testing.T, version string, bins ...string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("go", "run", "./internal/tools/release", "-out", out, "-arch", runtime.GOARCH,
		"-version", version, "-bin", strings.Join(bins, ","))
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./internal/tools/release: %v\n%s", err, b)
	}
	return out
}

// deb returns the one .deb of bin in dir.
func deb(t *testing.T, dir, bin string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, bin+"_*.deb"))
	if len(m) != 1 {
		t.Fatalf("%s: want one %s_*.deb, found %q", dir, bin, m)
	}
	return m[0]
}

// TestIntegrationUnits installs the release's packages with dpkg on a
// Debian system whose PID 1 is systemd, and drives their units as an
// operator does: nothing runs until configured; the agent refuses to
// start without its platform's address, starts (READY) once given it,
// reads its token again on reload, takes a drop-in's setting and stops
// in time; pinproxy starts, and a package upgrade, then systemctl
// reload, each hand every connection of a running load to the new
// process while systemd follows the new main process; the platform
// waits for its tokens file.
func TestIntegrationUnits(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short: boots a container with systemd")
	}
	testkit.NeedRoot(t, "mmdebstrap", "go")
	d := dockerlab.Start(t)
	start := time.Now()
	dir1 := debs(t, v1, "proofkit-agent", "pinproxy", "proofkit-platform")
	dir2 := debs(t, v2, "pinproxy")
	t.Logf("built the packages in %v", time.Since(start).Round(time.Second))
	m := Boot(t, d)
	for _, p := range []string{deb(t, dir1, "proofkit-agent"), deb(t, dir1, "pinproxy"), deb(t, dir1, "proofkit-platform"), deb(t, dir2, "pinproxy")} {
		m.Copy(t, p, "/var/tmp/"+filepath.Base(p))
	}
	out := m.Run(t, "sh", "-c", "dpkg -i /var/tmp/proofkit-agent_0.0.1*.deb /var/tmp/pinproxy_0.0.1*.deb /var/tmp/proofkit-platform_0.0.1*.deb")
	for _, want := range []string{"PROOFKIT_AGENT_REPORT_URL", "/etc/pinproxy/upstreams", "/etc/proofkit-platform/tokens"} {
		if !strings.Contains(out, want) {
			t.Errorf("dpkg -i did not tell the operator about %s:\n%s", want, out)
		}
	}
	for _, unit := range []string{"proofkit-agent", "pinproxy", "pinproxy.socket", "proofkit-platform"} {
		if got := m.Show(t, unit, "ActiveState"); got != "inactive" {
			t.Errorf("%s is %s after dpkg -i: nothing may run before the operator configured it", unit, got)
		}
		if got, _ := m.Exec("systemctl", "is-enabled", unit); strings.TrimSpace(got) != "disabled" {
			t.Errorf("%s is %q after dpkg -i, want disabled", unit, strings.TrimSpace(got))
		}
	}
	for _, user := range []string{"proofkit-agent", "pinproxy", "proofkit-platform"} {
		m.Run(t, "getent", "passwd", user)
	}
	if got := strings.TrimSpace(m.Run(t, "stat", "-c", "%U %a", "/etc/proofkit-agent")); got != "proofkit-agent 700" {
		t.Errorf("/etc/proofkit-agent is %q, want the agent user's, mode 700", got)
	}

	t.Run("agent", func(t *testing.T) { testAgent(t, m) })
	t.Run("pinproxy", func(t *testing.T) { testPinproxy(t, m) })
	t.Run("platform", func(t *testing.T) { testPlatform(t, m) })
}

// reports is a platform stand-in that records each report's bearer token.
type reports struct {
	mu     sync.Mutex
	tokens []string
}

func (r *reports) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	r.tokens = append(r.tokens, strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer "))
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, "{}\n")
}

func (r *reports) seen(token string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.tokens {
		if t == token {
			return true
		}
	}
	return false
}

// listen opens a loopback listener in the machine's network namespace.
func listen(t *testing.T, m *Machine) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := m.InNetns(t, func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dial connects to addr from inside the machine's network namespace.
func dial(t *testing.T, m *Machine, addr string) (net.Conn, error) {
	var c net.Conn
	err := m.InNetns(t, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	return c, err
}

// stopWithin stops unit and fails t unless systemd saw it stop by itself
// (Result=success) within its TimeoutStopSec.
func stopWithin(t *testing.T, m *Machine, unit string) time.Duration {
	t.Helper()
	limit, err := time.ParseDuration(strings.ReplaceAll(m.Show(t, unit, "TimeoutStopUSec"), "min", "m"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	m.Run(t, "systemctl", "stop", unit)
	took := time.Since(start)
	if res := m.Show(t, unit, "Result"); res != "success" || took >= limit {
		t.Errorf("systemctl stop %s: Result=%s after %v; want success within TimeoutStopSec (%v)", unit, res, took.Round(time.Millisecond), limit)
	}
	return took
}

func testAgent(t *testing.T, m *Machine) {
	help, _ := m.Exec("/usr/bin/proofkit-agent", "-help")
	requireReport := strings.Contains(help, "-require-report")
	if requireReport {
		// Unconfigured, then the documentation's placeholder: each a
		// refusal that names the setting, exit 2, and no restart loop.
		shipped := m.Run(t, "cat", "/etc/default/proofkit-agent")
		for _, url := range []string{"", "https://platform.example/api/v1/readings"} {
			m.WriteFile(t, "/etc/default/proofkit-agent", []byte(strings.Replace(shipped,
				"PROOFKIT_AGENT_REPORT_URL=\n", "PROOFKIT_AGENT_REPORT_URL="+url+"\n", 1)), 0o644)
			if out, err := m.Exec("systemctl", "start", "proofkit-agent"); err == nil {
				t.Errorf("systemctl start with report URL %q succeeded:\n%s", url, out)
			}
			time.Sleep(7 * time.Second) // longer than RestartSec=5: a restart would have come
			if st, n := m.Show(t, "proofkit-agent", "ExecMainStatus"), m.Show(t, "proofkit-agent", "NRestarts"); st != "2" || n != "0" {
				t.Errorf("report URL %q: exit status %s, %s restarts; want 2, none (RestartPreventExitStatus=2)", url, st, n)
			}
			journal := strings.ToLower(m.Run(t, "journalctl", "-u", "proofkit-agent", "--no-pager"))
			if !strings.Contains(journal, "report_url") && !strings.Contains(journal, "report-url") {
				t.Errorf("report URL %q: the journal does not name the setting:\n%s", url, journal)
			}
			m.Run(t, "systemctl", "reset-failed", "proofkit-agent")
		}
		m.WriteFile(t, "/etc/default/proofkit-agent", []byte(shipped), 0o644)
	} else {
		// The agent of this tree predates -require-report: run the unit
		// without that flag, everything else as shipped.
		t.Log("proofkit-agent -help lists no -require-report: the unconfigured start's refusal is not checked, and the unit runs without the flag")
		unit := m.Run(t, "systemctl", "cat", "proofkit-agent")
		exec := ""
		for l := range strings.SplitSeq(strings.ReplaceAll(unit, "\\\n", " "), "\n") {
			if strings.HasPrefix(l, "ExecStart=") {
				exec = strings.Join(strings.Fields(strings.Replace(l, "-require-report", "", 1)), " ")
			}
		}
		m.WriteFile(t, "/etc/systemd/system/proofkit-agent.service.d/no-require-report.conf",
			[]byte("[Service]\nExecStart=\n"+exec+"\n"), 0o644)
		m.Run(t, "systemctl", "daemon-reload")
	}

	rec := reportTo(t, m)
	m.WriteFile(t, "/etc/proofkit-agent/token", []byte("token-1\n"), 0o600)
	m.Run(t, "chown", "proofkit-agent:", "/etc/proofkit-agent/token")

	// Type=notify: start returns once the agent said READY=1.
	start := time.Now()
	m.Run(t, "systemctl", "start", "proofkit-agent")
	t.Logf("systemctl start proofkit-agent returned (READY) after %v", time.Since(start).Round(time.Millisecond))
	if st, sub := m.Show(t, "proofkit-agent", "ActiveState"), m.Show(t, "proofkit-agent", "SubState"); st != "active" || sub != "running" {
		t.Fatalf("after start: %s/%s, want active/running", st, sub)
	}
	testkit.WaitForWithin(t, time.Minute, "a report with the first token", func() bool { return rec.seen("token-1") })
	pid := m.Show(t, "proofkit-agent", "MainPID")
	if user := strings.TrimSpace(m.Run(t, "ps", "-o", "user=", "-p", pid)); user != "proofkit-agent" {
		t.Errorf("the agent runs as %q, want the package's proofkit-agent user", user)
	}
	// One capability, the one that lets it size the kernel's net.* keys.
	if eff := m.Run(t, "sh", "-c", "grep CapEff /proc/"+pid+"/status"); !strings.HasSuffix(strings.TrimSpace(eff), "0000000000001000") {
		t.Errorf("the agent's effective capabilities: %s; want CAP_NET_ADMIN alone (0x1000)", strings.TrimSpace(eff))
	}

	// A rotated token, written to a new file renamed over the old one.
	m.WriteFile(t, "/etc/proofkit-agent/token", []byte("token-2\n"), 0o600)
	m.Run(t, "chown", "proofkit-agent:", "/etc/proofkit-agent/token")
	m.Run(t, "systemctl", "reload", "proofkit-agent")
	testkit.WaitForWithin(t, time.Minute, "a report with the rotated token after systemctl reload", func() bool { return rec.seen("token-2") })
	if got := m.Show(t, "proofkit-agent", "MainPID"); got != pid {
		t.Errorf("reload restarted the agent: main PID %s, then %s", pid, got)
	}

	// A drop-in's Environment= is the other way to change a setting: no
	// flag on the unit's command line may beat it.
	m.WriteFile(t, "/etc/systemd/system/proofkit-agent.service.d/listen.conf",
		[]byte("[Service]\nEnvironment=PROOFKIT_AGENT_LISTEN=127.0.0.1:9465\n"), 0o644)
	m.Run(t, "systemctl", "daemon-reload")
	m.Run(t, "systemctl", "restart", "proofkit-agent")
	if out, err := m.Exec("/usr/bin/proofkit-agent", "-healthcheck", "-listen", "127.0.0.1:9465"); err != nil {
		t.Errorf("a drop-in set PROOFKIT_AGENT_LISTEN=127.0.0.1:9465; nothing answers there: %v\n%s\n%s", err, out,
			m.Run(t, "systemctl", "cat", "proofkit-agent"))
	}
	m.Run(t, "rm", "/etc/systemd/system/proofkit-agent.service.d/listen.conf")
	m.Run(t, "systemctl", "daemon-reload")
	m.Run(t, "systemctl", "restart", "proofkit-agent")
	took := stopWithin(t, m, "proofkit-agent")
	t.Logf("systemctl stop proofkit-agent took %v", took.Round(time.Millisecond))
	if st := m.Show(t, "proofkit-agent", "ExecMainStatus"); st != "0" {
		t.Errorf("the agent exited %s on SIGTERM, want 0", st)
	}
}

// echo serves each connection's bytes back until it closes.
func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}

func testPinproxy(t *testing.T, m *Machine) {
	up1, up2 := listen(t, m), listen(t, m)
	go echo(up1)
	go echo(up2)
	m.WriteFile(t, "/etc/pinproxy/upstreams", []byte(up1.Addr().String()+"\n"+up2.Addr().String()+"\n"), 0o644)
	// LimitNOFILE=65536 above the container's hard limit needs
	// CAP_SYS_RESOURCE, which some hosts withhold from containers.
	if hard, _ := strconv.Atoi(strings.TrimSpace(m.Run(t, "sh", "-c", "ulimit -Hn"))); hard > 0 && hard < 65536 {
		t.Logf("the container's open-file limit is %d: a drop-in lowers the unit's LimitNOFILE=65536 to it", hard)
		m.WriteFile(t, "/etc/systemd/system/pinproxy.service.d/nofile.conf", fmt.Appendf(nil, "[Service]\nLimitNOFILE=%d\n", hard), 0o644)
		m.Run(t, "systemctl", "daemon-reload")
	}
	start := time.Now()
	m.Run(t, "systemctl", "start", "pinproxy")
	t.Logf("systemctl start pinproxy returned (READY) after %v", time.Since(start).Round(time.Millisecond))
	pid1 := m.Show(t, "pinproxy", "MainPID")
	if st := m.Show(t, "pinproxy", "ActiveState"); st != "active" {
		t.Fatalf("pinproxy after start: %s", st)
	}
	if user := strings.TrimSpace(m.Run(t, "ps", "-o", "user=", "-p", pid1)); user != "pinproxy" {
		t.Errorf("pinproxy runs as %q, want the package's pinproxy user", user)
	}

	// A running load: each client sends a line every 20 ms and reads it
	// back, through the upgrade.
	const clients = 40
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg             sync.WaitGroup
		echoed, failed atomic.Int64
		mu             sync.Mutex
		firstFailure   error
		conns          []net.Conn
	)
	for i := range clients {
		c, err := dial(t, m, "127.0.0.1:9333")
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		conns = append(conns, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := bufio.NewReader(c)
			for n := 0; ctx.Err() == nil; n++ {
				line := fmt.Sprintf("client %d line %d\n", i, n)
				c.SetDeadline(time.Now().Add(15 * time.Second))
				_, err := io.WriteString(c, line)
				var got string
				if err == nil {
					got, err = r.ReadString('\n')
				}
				if err == nil && got != line {
					err = fmt.Errorf("read %q, want %q", got, line)
				}
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if firstFailure == nil {
						firstFailure = fmt.Errorf("client %d: %w", i, err)
					}
					mu.Unlock()
					return
				}
				echoed.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	testkit.WaitFor(t, "the load to run", func() bool { return echoed.Load() > clients*5 })

	// The new package: its postinst upgrades the running proxy in place.
	out := m.Run(t, "sh", "-c", "dpkg -i /var/tmp/pinproxy_0.0.2*.deb")
	var pid2 string
	testkit.WaitForWithin(t, time.Minute, "systemd to follow the new main process", func() bool {
		pid2 = m.Show(t, "pinproxy", "MainPID")
		return pid2 != pid1 && pid2 != "0"
	})
	if exe := m.Run(t, "readlink", "/proc/"+pid2+"/exe"); strings.TrimSpace(exe) != "/usr/bin/pinproxy" {
		t.Errorf("the new main process runs %q", exe)
	}
	if got := m.Run(t, "/usr/bin/pinproxy", "-version"); !strings.Contains(got, v2) {
		t.Errorf("after the upgrade /usr/bin/pinproxy -version prints %q, want %s", got, v2)
	}
	before := echoed.Load()
	testkit.WaitFor(t, "the load to run on through the new process", func() bool { return echoed.Load() > before+clients*10 })
	if st, sub, n := m.Show(t, "pinproxy", "ActiveState"), m.Show(t, "pinproxy", "SubState"), m.Show(t, "pinproxy", "NRestarts"); st != "active" || sub != "running" || n != "0" {
		t.Errorf("after the upgrade: %s/%s, %s restarts; want active/running, none", st, sub, n)
	}
	if _, err := m.Exec("kill", "-0", pid1); err == nil {
		t.Errorf("the old process %s still runs after the upgrade", pid1)
	}

	// systemctl reload is an upgrade too: the binary installed now runs,
	// with every connection of the load.
	m.Run(t, "systemctl", "reload", "pinproxy")
	var pid3 string
	testkit.WaitForWithin(t, time.Minute, "systemd to follow the main process systemctl reload started", func() bool {
		pid3 = m.Show(t, "pinproxy", "MainPID")
		return pid3 != pid2 && pid3 != "0"
	})
	before = echoed.Load()
	testkit.WaitFor(t, "the load to run on through the reloaded process", func() bool { return echoed.Load() > before+clients*10 })
	if st, sub, n := m.Show(t, "pinproxy", "ActiveState"), m.Show(t, "pinproxy", "SubState"), m.Show(t, "pinproxy", "NRestarts"); st != "active" || sub != "running" || n != "0" {
		t.Errorf("after systemctl reload: %s/%s, %s restarts; want active/running, none", st, sub, n)
	}
	if _, err := m.Exec("kill", "-0", pid2); err == nil {
		t.Errorf("the process %s still runs after systemctl reload", pid2)
	}
	cancel()
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d connections failed across the upgrade and the reload (dpkg said:\n%s); first: %v", n, clients, out, firstFailure)
	}
	t.Logf("%d lines echoed by %d connections across the upgrade and the reload (main PID %s → %s → %s)", echoed.Load(), clients, pid1, pid2, pid3)
	for _, c := range conns {
		c.Close()
	}
	if unifiedCgroup(t, m) {
		took := stopWithin(t, m, "pinproxy")
		t.Logf("systemctl stop pinproxy after the upgrade took %v", took.Round(time.Millisecond))
	} else {
		// The new process is not systemd's child (the old one started
		// it), and a systemd in a container on cgroup v1 cannot see such
		// a main process exit: it sends SIGKILL at once instead of
		// waiting after SIGTERM. On a host, or on cgroup v2, it waits.
		m.Run(t, "systemctl", "stop", "pinproxy")
		t.Logf("cgroup v1 in a container: the stop after the upgrade ended %s (systemd does not wait for a main process it did not start); a stop of a fresh start is checked instead",
			m.Show(t, "pinproxy", "Result"))
		m.Run(t, "systemctl", "start", "pinproxy")
		took := stopWithin(t, m, "pinproxy")
		t.Logf("systemctl stop pinproxy took %v", took.Round(time.Millisecond))
	}
}

// unifiedCgroup reports whether the machine's systemd keeps its units on
// cgroup v2 (fully, or its own hierarchy in hybrid mode).
func unifiedCgroup(t *testing.T, m *Machine) bool {
	fs := strings.TrimSpace(m.Run(t, "stat", "-fc", "%T", "/sys/fs/cgroup"))
	_, err := m.Exec("test", "-d", "/sys/fs/cgroup/unified/system.slice")
	return fs == "cgroup2fs" || err == nil
}

func testPlatform(t *testing.T, m *Machine) {
	// No tokens file: the condition keeps it from starting.
	m.Run(t, "systemctl", "start", "proofkit-platform")
	if got := m.Show(t, "proofkit-platform", "ConditionResult"); got != "no" {
		t.Errorf("started with no tokens file: ConditionResult=%s", got)
	}
	m.WriteFile(t, "/etc/proofkit-platform/tokens", []byte("admin-token\n"), 0o640)
	m.Run(t, "chgrp", "proofkit-platform", "/etc/proofkit-platform/tokens")
	m.Run(t, "systemctl", "start", "proofkit-platform")
	var status int
	testkit.WaitForWithin(t, time.Minute, "the platform to answer /healthz", func() bool {
		c, err := dial(t, m, "127.0.0.1:8080")
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET /healthz HTTP/1.0\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		status = resp.StatusCode
		return true
	})
	if status != http.StatusOK {
		t.Errorf("/healthz: %d", status)
	}
	stopWithin(t, m, "proofkit-platform")
}

// TestIntegrationTarballByHand installs the agent from its release
// tarball by hand, running the install lines at the top of its unit file
// as written (sudo dropped), on a Debian system whose PID 1 is systemd:
// the user they make runs it, it starts (READY) once its settings file
// has the platform's address, and it reports with the token they
// installed.
func TestIntegrationTarballByHand(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short: boots a container with systemd")
	}
	testkit.NeedRoot(t, "mmdebstrap", "go")
	d := dockerlab.Start(t)
	dir := debs(t, v1, "proofkit-agent")
	tgz, _ := filepath.Glob(filepath.Join(dir, "proofkit-agent-*-linux-"+runtime.GOARCH+".tar.gz"))
	if len(tgz) != 1 {
		t.Fatalf("%s: want one tarball of proofkit-agent, found %q", dir, tgz)
	}
	m := Boot(t, d)
	m.Copy(t, tgz[0], "/var/tmp/agent.tar.gz")
	m.Run(t, "sh", "-c", "cd /var/tmp && tar xzf agent.tar.gz")
	work := "/var/tmp/" + strings.TrimSuffix(filepath.Base(tgz[0]), ".tar.gz")
	m.WriteFile(t, work+"/token", []byte("token-by-hand\n"), 0o600)

	// The header's command lines, in order: the install lines, then the
	// start once the address is set.
	unit := m.Run(t, "cat", work+"/proofkit-agent.service")
	var install []string
	start := ""
	for l := range strings.SplitSeq(unit, "\n") {
		cmd, ok := strings.CutPrefix(l, "#   sudo ")
		if !ok {
			continue
		}
		cmd, _, _ = strings.Cut(cmd, "   #") // a comment after the command
		cmd = strings.ReplaceAll(strings.TrimSpace(cmd), "sudo ", "")
		if strings.Contains(cmd, "enable --now") {
			start = cmd
			break
		}
		install = append(install, cmd)
	}
	if len(install) == 0 || start == "" {
		t.Fatalf("proofkit-agent.service's header has no install lines and start line:\n%s", unit)
	}
	for _, cmd := range install {
		if out, err := m.Exec("sh", "-c", "cd "+work+" && "+cmd); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
	}

	rec := reportTo(t, m)
	if out, err := m.Exec("sh", "-c", start); err != nil {
		t.Fatalf("%s: %v\n%s", start, err, out)
	}
	pid := m.Show(t, "proofkit-agent", "MainPID")
	if st := m.Show(t, "proofkit-agent", "ActiveState"); st != "active" {
		t.Fatalf("after %q: %s", start, st)
	}
	if user := strings.TrimSpace(m.Run(t, "ps", "-o", "user=", "-p", pid)); user != "proofkit-agent" {
		t.Errorf("the agent runs as %q, want the proofkit-agent user the install lines made", user)
	}
	testkit.WaitForWithin(t, time.Minute, "a report with the token installed by hand", func() bool { return rec.seen("token-by-hand") })
	stopWithin(t, m, "proofkit-agent")
}

// reportTo serves a platform's readings URL to m, and sets it, with a
// reading every 2 s, in the agent's settings file there (the empty
// PROOFKIT_AGENT_REPORT_URL= line the package installs): the readings
// the agent sends arrive in the reports returned.
func reportTo(t *testing.T, m *Machine) *reports {
	t.Helper()
	rec := &reports{}
	ln := listen(t, m)
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	conf := m.Run(t, "cat", "/etc/default/proofkit-agent")
	conf = strings.Replace(conf, "PROOFKIT_AGENT_REPORT_URL=\n", "PROOFKIT_AGENT_REPORT_URL=http://"+ln.Addr().String()+"/report\nPROOFKIT_AGENT_INTERVAL=2s\n", 1)
	if !strings.Contains(conf, ln.Addr().String()) {
		t.Fatalf("/etc/default/proofkit-agent has no empty PROOFKIT_AGENT_REPORT_URL= line to set:\n%s", conf)
	}
	m.WriteFile(t, "/etc/default/proofkit-agent", []byte(conf), 0o644)
	return rec
}
