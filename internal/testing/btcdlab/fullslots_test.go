package btcdlab

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btcsuite/btcd/wire"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// A btcd node whose inbound slots are full (--maxpeers 1, taken by a peer
// connected to it directly) accepts the proxy's connections and ends each
// session after the handshake. The proxy's clients settle on the healthy
// node after a few disconnects, the full node is reported as refusing
// sessions, and no rebalance round moves a connection onto it. Once its
// slot frees, one connection moves back, which fills the slot again, and
// no round moves another there.
func TestIntegrationBtcdFullSlots(t *testing.T) {
	if dir := os.Getenv(envChild); dir != "" {
		fullSlots(t, dir)
		return
	}
	inNamespace(t)
}

func fullSlots(t *testing.T, bin string) {
	tmp := t.TempDir()
	full := startBtcd(t, bin, tmp, "A", addrA, "--maxpeers", "1")
	healthy := startBtcd(t, bin, tmp, "B", addrB)

	// The slot's holder, connected to A directly.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	holderCtx, freeSlot := context.WithCancel(ctx)
	holder := &client{name: "holder", addr: addrA}
	wg.Go(func() { holder.hold(holderCtx) })
	waitFor(t, "a peer to take A's only slot", func() bool { return holder.up.Load() })

	args := []string{"-listen", proxyAddr, "-admin", adminAddr, "-upstreams", addrA + "," + addrB,
		"-rebalance-interval", "2s", "-max-conns", "100",
		"-check-send", hex.EncodeToString(checkSend(t, wire.SimNet)),
		"-check-expect", hex.EncodeToString(checkExpect(wire.SimNet))}
	proxyLog := &testkit.LogBuffer{}
	proxy := testkit.StartProc(t, exec.Command(filepath.Join(bin, "pinproxy"), args...),
		func(line string) { proxyLog.Write([]byte(line + "\n")) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pinproxy:\n%s\nbtcd A:\n%s\nbtcd B:\n%s", proxy.Log.String(), full.Log.String(), healthy.Log.String())
		}
	})
	waitFor(t, "pinproxy to listen", func() bool {
		return strings.Contains(proxy.Log.String(), `msg="pinproxy listening"`)
	})

	var clients []*client
	start := time.Now()
	for i := range 4 {
		cl := &client{name: fmt.Sprint("c", i)}
		clients = append(clients, cl)
		wg.Go(func() { cl.hold(ctx) })
	}
	disconnects := func() int64 {
		var n int64
		for _, cl := range clients {
			n += cl.disconnects.Load()
		}
		return n
	}
	allUp := func() bool {
		for _, cl := range clients {
			if !cl.up.Load() {
				return false
			}
		}
		return true
	}
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
	if st[addrA].Refusing == "" || !strings.Contains(proxyLog.String(), "upstream refuses sessions; trying it last") {
		t.Errorf("A not reported as refusing sessions: %+v", st[addrA])
	}
	if m := metrics(t); !strings.Contains(m, `pinproxy_upstream_refusing_sessions{upstream="`+addrA+`"} 1`) {
		t.Errorf("/metrics does not say A refuses sessions")
	}
	if strings.Contains(proxyLog.String(), "moving a connection") {
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
	moves := strings.Count(proxyLog.String(), "moving a connection")
	t.Logf("A's slot freed: a connection back on A after %v; then %d moves in all, %d disconnects since the slot freed, failed moves in log: %v",
		back.Round(10*time.Millisecond), moves, disconnects()-settledAfter, strings.Contains(proxyLog.String(), "redial was refused"))
	if st[addrA].Live != 1 || st[addrB].Live != 3 || disconnects() != before || moves != 1 {
		t.Errorf("after the move back: A %+v, B %+v, %d disconnects since (want none), %d moves (want 1)",
			st[addrA], st[addrB], disconnects()-before, moves)
	}
}

// metrics reads the proxy's /metrics.
func metrics(t *testing.T) string {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
