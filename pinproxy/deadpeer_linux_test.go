package pinproxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// deadNet is a network namespace joined to this one by a veth pair: a
// host whose traffic on a port an nft rule can cut both ways, as when it
// loses power.
type deadNet struct {
	ns             string
	hostIP, nsIP   string
	nsHandle       *os.File
	runInNamespace func(args ...string)
}

func newDeadNet(t *testing.T) *deadNet {
	t.Helper()
	testkit.NeedRoot(t, "ip", "nft")
	pid := os.Getpid()
	ns := fmt.Sprintf("pinproxy-dead-%d", pid)
	host, peer := fmt.Sprintf("pxdh%d", pid%100000), fmt.Sprintf("pxdn%d", pid%100000)
	x := (pid + 100) % 250
	d := &deadNet{ns: ns, hostIP: fmt.Sprintf("10.234.%d.1", x), nsIP: fmt.Sprintf("10.234.%d.2", x)}
	run := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	d.runInNamespace = func(args ...string) { run(append([]string{"ip", "netns", "exec", ns}, args...)...) }
	run("ip", "netns", "add", ns)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", host).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	run("ip", "link", "add", host, "type", "veth", "peer", "name", peer, "netns", ns)
	run("ip", "addr", "add", d.hostIP+"/30", "dev", host)
	run("ip", "link", "set", host, "up")
	run("ip", "-n", ns, "addr", "add", d.nsIP+"/30", "dev", peer)
	run("ip", "-n", ns, "link", "set", peer, "up")
	run("ip", "-n", ns, "link", "set", "lo", "up")
	d.runInNamespace("nft", "add table inet dead; add chain inet dead in { type filter hook input priority 0; }; add chain inet dead out { type filter hook output priority 0; }")
	f, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	d.nsHandle = f
	return d
}

// inside runs f on a thread in the namespace: sockets f makes live there.
func (d *deadNet) inside(t *testing.T, f func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // left locked on failure: the thread then dies with the goroutine
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			done <- err
			return
		}
		defer self.Close()
		if err := unix.Setns(int(d.nsHandle.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		runtime.UnlockOSThread()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// kill drops every packet to and from port inside the namespace: the
// peer there neither answers nor sends again.
func (d *deadNet) kill(port int) {
	d.runInNamespace("nft", fmt.Sprintf("add rule inet dead in tcp dport %d drop; add rule inet dead in tcp sport %d drop; add rule inet dead out tcp sport %d drop; add rule inet dead out tcp dport %d drop", port, port, port, port))
}

// A peer whose host dies is found by keepalive when the connection idles
// and by the user timeout when data sent to it is unacknowledged, with a
// short keepalive (1 s: found within 1 + 9 × 1 s); the other side is
// reset, and the line says error with the timeout.
func TestIntegrationDeadPeer(t *testing.T) {
	d := newDeadNet(t)
	for _, tc := range []struct {
		name      string
		dead      string // "upstream" or "client": which side's host dies
		unacked   bool   // data is sent towards the dead side after it dies
		parkAfter time.Duration
	}{
		{"upstream dies with data unacknowledged", "upstream", true, -1},
		{"upstream dies idle", "upstream", false, -1},
		{"upstream dies idle, parked", "upstream", false, time.Millisecond},
		{"client dies idle", "client", false, -1},
		{"client dies with data unacknowledged, parked", "client", true, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log, buf := testLogger(t)
			var upLn net.Listener
			upAddr := "127.0.0.1:0"
			if tc.dead == "upstream" {
				upAddr = net.JoinHostPort(d.nsIP, "0")
			}
			listen := func() {
				var err error
				var lc net.ListenConfig
				lc.KeepAlive = -1 // the dead side sends nothing of its own
				if upLn, err = lc.Listen(context.Background(), "tcp", upAddr); err != nil {
					t.Error(err)
				}
			}
			if tc.dead == "upstream" {
				d.inside(t, listen)
			} else {
				listen()
			}
			if upLn == nil {
				t.FailNow()
			}
			defer upLn.Close()
			p := newProxy(t, pinproxy.Config{Upstreams: []string{upLn.Addr().String()}, RebalanceInterval: -1,
				KeepAlive: time.Second, ParkAfter: tc.parkAfter, LogConnections: true, Logger: log})
			ln, err := p.Listen(context.Background(), "tcp", net.JoinHostPort(d.hostIP, "0"))
			if err != nil {
				t.Fatal(err)
			}
			served := serveOn(p, ln)
			defer shutdown(t, p, served)

			var client net.Conn
			dial := func() {
				dl := net.Dialer{KeepAlive: -1}
				if client, err = dl.Dial("tcp", ln.Addr().String()); err != nil {
					t.Error(err)
				}
			}
			if tc.dead == "client" {
				d.inside(t, dial)
			} else {
				dial()
			}
			if client == nil {
				t.FailNow()
			}
			defer client.Close()
			upLn.(*net.TCPListener).SetDeadline(time.Now().Add(pinproxytest.WaitFor))
			upstream, err := upLn.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer upstream.Close()
			rp := resetPair{p: p, log: buf, client: client.(*net.TCPConn), upstream: upstream.(*net.TCPConn)}
			rp.roundTrip(t)
			if tc.parkAfter > 0 {
				rp.waitParked(t)
			}

			live, dead := rp.client, rp.upstream
			deadPort := upLn.Addr().(*net.TCPAddr).Port
			if tc.dead == "client" {
				live, dead = rp.upstream, rp.client
				deadPort = ln.Addr().(*net.TCPAddr).Port
			}
			_ = dead
			d.kill(deadPort)
			start := time.Now()
			if tc.unacked {
				if _, err := live.Write(make([]byte, 4096)); err != nil {
					t.Fatal(err)
				}
			}
			live.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
			_, err = io.Copy(io.Discard, live)
			took := time.Since(start)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("the live side read until %v after %v; want a reset within about 10 s", err, took.Round(time.Millisecond))
			}
			t.Logf("reset after %v", took.Round(100*time.Millisecond))
			line := rp.waitLine(t)
			if !strings.Contains(line, "reason=error") || !strings.Contains(line, "connection timed out") {
				t.Errorf("line %q: want reason=error with the timeout as err", line)
			}
		})
	}
}
