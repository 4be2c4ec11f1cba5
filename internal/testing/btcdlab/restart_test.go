package btcdlab

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/btcsuite/btcd/wire"
)

// The pull request's scenario against real btcd: the proxy starts before
// one node does, so the clients land on the other; once the node listens,
// connections move back until the spread is even. That node restarts
// while clients hold connections on it: they fail over, nothing else is
// closed while it is down, and once it is back connections move back
// again. Then an upgrade (SIGUSR2, a new copy of the binary) drops none
// of the held peer connections, and each still answers a ping.
func TestIntegrationBtcdRestart(t *testing.T) {
	if dir := os.Getenv(envChild); dir != "" {
		restart(t, dir)
		return
	}
	inNamespace(t)
}

func restart(t *testing.T, bin string) {
	tmp := t.TempDir()
	startBtcd(t, bin, tmp, "B", addrB)
	// The binary runs from a directory of its own, where the upgrade
	// puts its next copy.
	exe := filepath.Join(tmp, "bin", "pinproxy")
	copyFile(t, filepath.Join(bin, "pinproxy"), exe)
	proxy := startProxy(t, exe, addrA+","+addrB)
	clients := holdClients(t, 4)
	disconnects, allUp := clients.disconnects, clients.allUp
	moves := func() int { return strings.Count(proxy.Log.String(), "moving a connection") }
	even := func() bool {
		st := status(t)
		return allUp() && st[addrA].Live == 2 && st[addrB].Live == 2
	}

	waitFor(t, "the clients to connect through B", func() bool { return allUp() && status(t)[addrB].Live == 4 })
	if n := disconnects(); n != 0 {
		t.Errorf("%d disconnects while A was not started, want none (a refused connect is retried by the proxy)", n)
	}
	// A starts late.
	started := time.Now()
	a := startBtcd(t, bin, tmp, "A", addrA)
	waitFor(t, "the spread to even out after A started", even)
	time.Sleep(4 * time.Second)
	t.Logf("A started: spread even after %v, %d moves, %d disconnects", time.Since(started).Round(10*time.Millisecond), moves(), disconnects())
	if !even() || moves() != 2 || disconnects() != 2 {
		t.Fatalf("after A started: %v, %d moves, %d disconnects; want 2 and 2, 2 moves and a disconnect each", status(t), moves(), disconnects())
	}

	// A restarts while two clients hold connections on it.
	a.Kill()
	killed := time.Now()
	waitFor(t, "A's clients to fail over to B", func() bool { return allUp() && status(t)[addrB].Live == 4 })
	failover := time.Since(killed)
	time.Sleep(4 * time.Second) // two rounds while A is down: nothing closed
	if d, m := disconnects(), moves(); d != 4 || m != 2 {
		t.Fatalf("while A is down: %d disconnects, %d moves; want 4 (2 moves, 2 on A's end) and 2", d, m)
	}
	restarted := time.Now()
	startBtcd(t, bin, tmp, "A", addrA)
	waitFor(t, "the spread to even out after A restarted", even)
	time.Sleep(4 * time.Second)
	t.Logf("A killed: clients on B after %v; restarted: spread even after %v, %d moves, %d disconnects in all",
		failover.Round(10*time.Millisecond), time.Since(restarted).Round(10*time.Millisecond), moves(), disconnects())
	if !even() || moves() != 4 || disconnects() != 6 {
		t.Fatalf("after A restarted: %v, %d moves, %d disconnects; want 2 and 2, 4 moves, 6 disconnects", status(t), moves(), disconnects())
	}

	// An upgrade to the binary's next copy while the four hold.
	next := exe + ".next"
	copyFile(t, filepath.Join(bin, "pinproxy"), next)
	if err := os.Rename(next, exe); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the upgrade", func() bool { return strings.Contains(proxy.Log.String(), "upgrade: connections handed over") })
	m := regexp.MustCompile(`new_pid=(\d+)`).FindStringSubmatch(proxy.Log.String())
	if m == nil {
		t.Fatal("no new_pid in the upgrade's log line")
	}
	pid, _ := strconv.Atoi(m[1])
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	before := make([]int64, len(clients))
	for i, cl := range clients {
		before[i] = cl.pongs.Load()
		cl.cur.Load().QueueMessage(wire.NewMsgPing(uint64(i+1)), nil)
	}
	waitFor(t, "every client's ping to be answered", func() bool {
		for i, cl := range clients {
			if cl.pongs.Load() <= before[i] {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * time.Second)
	st := status(t)
	t.Logf("upgraded to pid %d: %d disconnects in all, A %d, B %d", pid, disconnects(), st[addrA].Live, st[addrB].Live)
	if disconnects() != 6 || !allUp() || st[addrA].Live != 2 || st[addrB].Live != 2 {
		t.Errorf("after the upgrade: %d disconnects (want 6, as before), A %+v, B %+v", disconnects(), st[addrA], st[addrB])
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
