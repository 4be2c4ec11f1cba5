package main

import (
	"context"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/agent"
	"github.com/proofkit/nodekit/agent/agenttest"
	"github.com/proofkit/nodekit/internal/testing/deploytest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// TestVersionLdflags: a build stamped with -ldflags -X reports that
// version in -version, in /metrics and in the start-up line.
func TestVersionLdflags(t *testing.T) {
	stamped := deploytest.BuildStamped(t, "proofkit-agent", "v0.5.0", "0123456789abcdef0123")
	out, err := exec.Command(stamped, "-version").CombinedOutput()
	if err != nil {
		t.Fatalf("-version: %v\n%s", err, out)
	}
	if got := string(out); !strings.HasPrefix(got, "proofkit-agent v0.5.0 (commit 0123456789ab, go1.") {
		t.Errorf("-version printed %q", got)
	}

	saved := bin
	bin = stamped
	defer func() { bin = saved }()
	p := start(t, node(t, agenttest.Node{MemoryUsedPercent: 40}), "-sysctl", "off", "-state-dir", t.TempDir())
	fams := p.metrics()
	f := fams["proofkit_agent_build_info"]
	if f == nil || len(f.GetMetric()) != 1 {
		t.Fatalf("proofkit_agent_build_info: %v", f)
	}
	labels := map[string]string{}
	for _, l := range f.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] != "v0.5.0" || labels["commit"] != "0123456789abcdef0123" || !strings.HasPrefix(labels["goversion"], "go1.") {
		t.Errorf("proofkit_agent_build_info labels %v", labels)
	}
	testkit.WaitFor(t, "the start-up line", func() bool {
		return strings.Contains(p.log(), `msg="agent started" version=v0.5.0 commit=0123456789abcdef0123`)
	})
	for name := range fams {
		if strings.HasPrefix(name, "node_") {
			t.Errorf("/metrics has %s: node_ names are node_exporter's", name)
		}
	}
	if p.stop() != 0 {
		t.Error("exit status not 0")
	}
}

// TestFlagsFromEnvironment: every flag has a PROOFKIT_AGENT_ variable; the
// command line wins.
func TestFlagsFromEnvironment(t *testing.T) {
	state := t.TempDir()
	env := map[string]string{
		"PROOFKIT_AGENT_NODE":       "from-env",
		"PROOFKIT_AGENT_INTERVAL":   "45s",
		"PROOFKIT_AGENT_STATE_DIR":  state,
		"PROOFKIT_AGENT_LINK_SPEED": "eth0=10G",
		"PROOFKIT_AGENT_LISTEN":     "127.0.0.1:9999",
		"PROOFKIT_AGENT_SYSCTL":     "off",
		"PROOFKIT_AGENT_LOG_FORMAT": "json",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	o, err := parseFlagsEnv([]string{"-listen", "127.0.0.1:9465"}, io.Discard, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if o.node != "from-env" || o.interval != 45*time.Second || o.stateDir != state || o.linkSpeed["eth0"] != 10000 ||
		o.sysctlMode != "off" || o.logFormat != "json" {
		t.Errorf("from the environment: %+v", o)
	}
	if o.listen != "127.0.0.1:9465" {
		t.Errorf("-listen %q: the command line should win over PROOFKIT_AGENT_LISTEN", o.listen)
	}
	env["PROOFKIT_AGENT_INTERVAL"] = "soon"
	_, err = parseFlagsEnv(nil, io.Discard, lookup)
	if err == nil || !strings.Contains(err.Error(), `PROOFKIT_AGENT_INTERVAL="soon"`) {
		t.Errorf("a bad variable: %v, want an error naming it and its value", err)
	}
	if o, err := parseFlagsEnv([]string{"-version"}, io.Discard, lookup); err != nil || !o.version {
		t.Errorf("-version with a bad variable: %v, want the version", err)
	}
}

// TestHealthcheckFlag: -healthcheck exits 0 against a running agent and 1
// where none listens.
func TestHealthcheckFlag(t *testing.T) {
	p := start(t, node(t, agenttest.Node{MemoryUsedPercent: 40}), "-sysctl", "off", "-state-dir", t.TempDir())
	addr := strings.TrimPrefix(p.url(""), "http://")
	out, err := exec.Command(bin, "-healthcheck", "-listen", addr).CombinedOutput()
	if err != nil || string(out) != "ok\n" {
		t.Errorf("-healthcheck against a running agent: %v %q", err, out)
	}
	cmd := exec.Command(bin, "-healthcheck")
	cmd.Env = append(cmd.Environ(), "PROOFKIT_AGENT_LISTEN="+addr)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("-healthcheck with PROOFKIT_AGENT_LISTEN: %v %q", err, out)
	}
	p.stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := ln.Addr().String()
	ln.Close()
	out, err = exec.Command(bin, "-healthcheck", "-listen", free).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "healthcheck") {
		t.Errorf("-healthcheck with no agent: %v %q, want exit 1 and a line saying why", err, out)
	}
}

// TestSystemdNotify: with $NOTIFY_SOCKET (a real unixgram socket, as
// systemd makes for Type=notify) the agent sends READY=1 once its first
// reading is taken, and STOPPING=1 on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := startEnv(t, []string{"NOTIFY_SOCKET=" + path}, node(t, agenttest.Node{MemoryUsedPercent: 40}),
		"-sysctl", "off", "-state-dir", t.TempDir())
	read := func() string {
		buf := make([]byte, 4096)
		_ = c.SetReadDeadline(time.Now().Add(testkit.Timeout))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("nothing on NOTIFY_SOCKET: %v", err)
		}
		return string(buf[:n])
	}
	if got := read(); !strings.HasPrefix(got, "READY=1\n") {
		t.Errorf("first datagram %q, want READY=1", got)
	}
	if !strings.Contains(p.log(), `msg=reading`) && !strings.Contains(p.log(), `msg="agent started"`) {
		t.Errorf("READY=1 before the agent started:\n%s", p.log())
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "STOPPING=1" {
		t.Errorf("on SIGTERM: %q, want STOPPING=1", got)
	}
	<-p.Done()
}

// TestNodeFromHostName: a refused node name that came from the host name
// (no -node) is named as such, with the flag that fixes it.
func TestNodeFromHostName(t *testing.T) {
	o, err := parseFlagsEnv([]string{"-sysctl", "off", "-proc", agenttest.Proc(node(t, agenttest.Node{})), "-sys", t.TempDir()}, io.Discard,
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	o.node = "a-host-name-of-seventy-characters-which-the-platform-will-not-take-xx"
	_, err = agent.New(agent.Config{Node: o.node, Source: nopSource{}, ReportURL: "http://127.0.0.1:1/r", Token: "t"})
	got := configError(err, o).Error()
	want := `-node not given, and the host name "` + o.node + `" is not a node name the platform takes`
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "; give -node") {
		t.Errorf("error %q, want it to start %q and end with the flag", got, want)
	}
	// Given in the environment, it is refused there, naming the variable.
	_, err = parseFlagsEnv([]string{"-sysctl", "off", "-proc", o.procRoot, "-sys", o.sysRoot}, io.Discard,
		func(k string) (string, bool) { return "bad name", k == "PROOFKIT_AGENT_NODE" })
	if err == nil || !strings.HasPrefix(err.Error(), `PROOFKIT_AGENT_NODE (-node) "bad name": want 1 to 64`) {
		t.Errorf("error %v does not name the variable", err)
	}
}

type nopSource struct{}

func (nopSource) Read(context.Context) (overload.Reading, error) { return overload.Reading{}, nil }

// TestParseLinkSpeedsNames: a name no network interface can have (the
// kernel's rule: 1 to 15 bytes, not . or .., no /, : or white space) was
// taken, and its speed never applied to any link.
func TestParseLinkSpeedsNames(t *testing.T) {
	for _, tt := range []struct{ in, err string }{
		{"eth0=1000,wg-0.1=10G,a_b=1", ""},
		{"enp0s31f6abcdef=1", ""}, // 15 bytes
		{"enp0s31f6abcdefg=1", `"enp0s31f6abcdefg=1": "enp0s31f6abcdefg" is not a network interface name (1 to 15 bytes, not . or .., no /, : or white space)`},
		{"eth 0=1", `"eth 0=1": "eth 0" is not a network interface name`},
		{"eth0:1=1", `"eth0:1=1": "eth0:1" is not a network interface name`},
		{"a/b=1", `"a/b=1": "a/b" is not a network interface name`},
		{"..=1", `"..=1": ".." is not a network interface name`},
	} {
		_, err := parseLinkSpeeds(tt.in)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.err)) {
			t.Errorf("parseLinkSpeeds(%q) = %v, want %q", tt.in, err, tt.err)
		}
	}
}
