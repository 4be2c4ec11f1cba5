package main

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/deploytest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// The unit tells systemd when the proxy is ready and lets the process an
// upgrade starts say it is the main one; the socket unit listens where
// the service would.
func TestDeployUnitNotifiesAndUpgrades(t *testing.T) {
	unit := deploytest.Read(t, "pinproxy.service")
	for key, want := range map[string]string{"Type": "notify", "NotifyAccess": "all"} {
		if got := deploytest.UnitValue(t, "pinproxy.service", unit, key); got != want {
			t.Errorf("%s=%s, want %s", key, got, want)
		}
	}
	if !strings.Contains(unit, "`systemctl reload pinproxy` runs it") {
		t.Error("the unit does not say how to upgrade")
	}
	o := unitOptions(t, unit)
	sock := deploytest.Read(t, "pinproxy.socket")
	if got := deploytest.UnitValue(t, "pinproxy.socket", sock, "ListenStream"); got != o.listen {
		t.Errorf("pinproxy.socket listens on %s, the service's -listen on %s", got, o.listen)
	}
	if got := deploytest.UnitValue(t, "pinproxy.socket", sock, "FileDescriptorName"); got != "proxy" {
		t.Errorf("FileDescriptorName=%s, want proxy (what the binary looks for in LISTEN_FDNAMES)", got)
	}
}

func TestDeploySocketVerifies(t *testing.T) {
	testkit.NeedTools(t, "systemd-analyze")
	dir := t.TempDir()
	unit := strings.Replace(deploytest.Read(t, "pinproxy.service"), "ExecStart=/usr/local/bin/pinproxy", "ExecStart="+binary, 1)
	for name, text := range map[string]string{"pinproxy.service": unit, "pinproxy.socket": deploytest.Read(t, "pinproxy.socket")} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("systemd-analyze", "verify", filepath.Join(dir, "pinproxy.socket"), filepath.Join(dir, "pinproxy.service")).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// Socket activation, as systemd does it (systemd-socket-activate sets
// LISTEN_FDS, LISTEN_PID and LISTEN_FDNAMES as systemd does): the proxy
// serves the socket it is given, and needs no -listen.
func TestBinarySocketActivation(t *testing.T) {
	testkit.NeedTools(t, "systemd-socket-activate")
	up := pinproxytest.New(t, "up", pinproxytest.Echo)
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	cmd := exec.Command("systemd-socket-activate", "-l", addr, "--fdname=proxy", binary, "-upstreams", up.Addr)
	out := &strings.Builder{}
	cmd.Stderr = &lockedWriter{w: out}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("log:\n%s", cmd.Stderr.(*lockedWriter).String())
		}
	})
	var c net.Conn
	testkit.WaitFor(t, "the activated socket to take a client", func() bool {
		c, err = net.Dial("tcp", addr)
		return err == nil
	})
	defer c.Close()
	c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	c.Write([]byte("hello\n"))
	var b [6]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "hello\n" {
		t.Fatalf("through the activated proxy: %q, %v", b, err)
	}
	testkit.WaitFor(t, "the proxy to say it serves the socket from systemd", func() bool {
		return strings.Contains(cmd.Stderr.(*lockedWriter).String(), `msg="listening on a socket from systemd" addr=`+addr)
	})
}

// lockedWriter is a strings.Builder that a process's output and the test
// may use at once.
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}
