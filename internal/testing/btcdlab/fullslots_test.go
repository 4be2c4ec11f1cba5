package btcdlab

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A btcd node whose inbound slots are full (--maxpeers 1, taken by a peer
// connected to it directly) accepts the proxy's connections and ends each
// session after the handshake. The proxy's clients settle on the healthy
// node after a few disconnects, the full node is reported as refusing
// sessions, and no rebalance round moves a connection onto it. Once its
// slot frees, one connection moves back, which fills the slot again, and
// no round moves another there. The same with health checks every second
// (half the rebalance interval): a round's test-connect and a check's
// never meet at the node's one slot.
func TestIntegrationBtcdFullSlots(t *testing.T) {
	if dir := os.Getenv(envChild); dir != "" {
		t.Run("passive", func(t *testing.T) { fullSlots(t, dir, false) })
		t.Run("checks", func(t *testing.T) { fullSlots(t, dir, true) })
		return
	}
	inNamespace(t)
}

func fullSlots(t *testing.T, bin string, checks bool) {
	tmp := t.TempDir()
	startBtcd(t, bin, tmp, "A", addrA, "--maxpeers", "1")
	startBtcd(t, bin, tmp, "B", addrB)

	// The slot's holder, connected to A directly.
	holderCtx, freeSlot := context.WithCancel(context.Background())
	holderDone := make(chan struct{})
	t.Cleanup(func() {
		freeSlot()
		<-holderDone
	})
	holder := &client{name: "holder", addr: addrA}
	go func() {
		defer close(holderDone)
		holder.hold(holderCtx)
	}()
	waitFor(t, "a peer to take A's only slot", func() bool { return holder.up.Load() })

	var extra []string
	if checks {
		extra = append(extra, "-check-interval", "1s")
	}
	proxy := startProxy(t, filepath.Join(bin, "pinproxy"), addrA+","+addrB, extra...)
	start := time.Now()
	clients := holdClients(t, 4)
	disconnects, allUp := clients.disconnects, clients.allUp
	waitFor(t, "the clients to settle on B", func() bool {
		st := status(t)
		return allUp() && st[addrB].Live == 4 && st[addrA].Live == 0
	})
	settled, settledAfter := time.Since(start), disconnects()
	time.Sleep(6 * time.Second) // three rebalance rounds
	st := status(t)
	t.Logf("settled on B in %v after %d disconnects; A: %q, %d refused sessions, state %s",
		settled.Round(10*time.Millisecond), settledAfter, st[addrA].Refusing, st[addrA].RefusedSessions, st[addrA].State)
	if n := disconnects(); n != settledAfter || !allUp() || st[addrB].Live != 4 {
		t.Fatalf("after settling: %d disconnects (%d at settling), B holds %d; want the clients to stay on B", n, settledAfter, st[addrB].Live)
	}
	if settledAfter > 6 {
		t.Errorf("%d disconnects before settling, want a few", settledAfter)
	}
	if st[addrA].Refusing == "" || !strings.Contains(proxy.Log.String(), "upstream refuses sessions; trying it last") {
		t.Errorf("A not reported as refusing sessions: %+v", st[addrA])
	}
	if m := metrics(t); !strings.Contains(m, `pinproxy_upstream_refusing_sessions{upstream="`+addrA+`"} 1`) {
		t.Errorf("/metrics does not say A refuses sessions")
	}
	if strings.Contains(proxy.Log.String(), "moving a connection") {
		t.Errorf("a round moved a connection while A's slots were full")
	}

	// A's slot frees: one connection moves back, which fills it again.
	freeSlot()
	freed := time.Now()
	waitFor(t, "a connection to move back to A", func() bool { return status(t)[addrA].Live == 1 && allUp() })
	back := time.Since(freed)
	before := disconnects()
	time.Sleep(8 * time.Second) // four rounds
	st = status(t)
	moves := strings.Count(proxy.Log.String(), "moving a connection")
	t.Logf("A's slot freed: a connection back on A after %v; then %d moves in all, %d disconnects since the slot freed, failed moves in log: %v",
		back.Round(10*time.Millisecond), moves, disconnects()-settledAfter, strings.Contains(proxy.Log.String(), "redial was refused"))
	if st[addrA].Live != 1 || st[addrB].Live != 3 || disconnects() != before || moves != 1 {
		t.Errorf("after the move back: A %+v, B %+v, %d disconnects since (want none), %d moves (want 1)",
			st[addrA], st[addrB], disconnects()-before, moves)
	}
}

// metrics reads the proxy's /metrics.
func metrics(t *testing.T) string {
	t.Helper()
	resp := get(t, "/metrics")
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
