package btcdlab

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btcsuite/btcd/chaincfg"
	"github.com/btcsuite/btcd/peer"
	"github.com/btcsuite/btcd/wire"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// build builds btcd and the pinproxy binary once per run.
var build = testkit.Build{Pkgs: []string{"github.com/btcsuite/btcd", "github.com/proofkit/nodekit/cmd/pinproxy"}}

func TestMain(m *testing.M) {
	code := m.Run()
	build.Clean()
	os.Exit(code)
}

// envChild names the environment variable that tells the test binary it
// runs inside the namespace, with the binaries' directory as its value.
const envChild = "BTCDLAB_BIN"

// Addresses inside the namespace, which is the test's own.
const (
	addrA     = "127.0.0.1:18555"
	addrB     = "127.0.0.1:18556"
	proxyAddr = "127.0.0.1:9333"
	adminAddr = "127.0.0.1:9334"
)

// wait bounds every wait of the scenario: a net against a hang, not a
// speed assertion.
const wait = 90 * time.Second

// One btcd node bans the proxy's address (a misbehaving client behind the
// proxy is enough: every client shares it). Four clients holding
// connections through the proxy, redialing a second after each
// disconnect, settle on the other node after a few disconnects, and once
// the banning node restarts clean, connections move back to it one per
// rebalance round until the spread is even.
func TestIntegrationBtcdBanFailover(t *testing.T) {
	if dir := os.Getenv(envChild); dir != "" {
		// Health from clients' sessions (the rebalance rounds'
		// test-connects running the version/verack exchange), and with
		// health checks running it every second too.
		t.Run("passive", func(t *testing.T) { banFailover(t, dir, false) })
		t.Run("checks", func(t *testing.T) { banFailover(t, dir, true) })
		return
	}
	inNamespace(t)
}

// inNamespace runs t's test function again, as a child process, in a
// network namespace of its own with the binaries built: the child finds
// their directory in envChild.
func inNamespace(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root, to run two btcd nodes and the proxy in a network namespace of its own")
	}
	testkit.NeedTools(t, "ip")
	start := time.Now()
	dir := build.Dir(t)
	t.Logf("built btcd and pinproxy in %v", time.Since(start).Round(time.Second))

	ns := fmt.Sprintf("btcdlab-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s link set lo up: %v: %s", ns, err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, self, "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"="+dir)
	out, err := cmd.CombinedOutput()
	t.Logf("in namespace %s:\n%s", ns, out)
	if err != nil {
		t.Fatalf("the scenario failed: %v", err)
	}
	t.Logf("took %v, the build included", time.Since(start).Round(time.Second))
}

// banFailover is the scenario, run inside the namespace; checks turns on
// health checks. Test-connects run the version/verack exchange either
// way: btcd checks bans and its peer limit only once the handshake is
// done, so a test-connect that only connects, or only holds the
// connection, is answered by a node that bans the proxy.
func banFailover(t *testing.T, bin string, checks bool) {
	tmp := t.TempDir()
	startBtcd(t, bin, tmp, "A", addrA)
	// B drops bloom filters, and a client that sends one anyway scores
	// 100, which B's threshold (99; btcd bans above its threshold,
	// 100 by default) makes a ban: one misbehaviour bans the address.
	bFlags := []string{"--nopeerbloomfilters", "--banthreshold", "99"}
	b := startBtcd(t, bin, tmp, "B", addrB, bFlags...)

	var extra []string
	if checks {
		extra = append(extra, "-check-interval", "1s")
	}
	proxy := startProxy(t, filepath.Join(bin, "pinproxy"), addrB+","+addrA, extra...)
	if checks {
		waitFor(t, "the checks to find both nodes up", func() bool {
			st := status(t)
			return st[addrA].State == "up" && st[addrB].State == "up"
		})
	}

	// A misbehaving client: it lands on B, listed first, and B bans the
	// proxy's address.
	bad := &client{name: "bad"}
	if !bad.session(func(p *peer.Peer) {
		p.QueueMessage(&wire.MsgFilterLoad{Filter: []byte{0}, HashFuncs: 1, Flags: wire.BloomUpdateNone}, nil)
	}) {
		t.Fatal("the misbehaving client's handshake failed")
	}
	waitFor(t, "B to ban the proxy's address", func() bool { return strings.Contains(b.Log.String(), "Banned peer 127.0.0.1") })

	// Four clients holding one connection each, redialing a second after
	// each disconnect.
	start := time.Now()
	clients := holdClients(t, 4)
	disconnects, allUp := clients.disconnects, clients.allUp
	waitFor(t, "the clients to settle on A", func() bool {
		st := status(t)
		return allUp() && st[addrA].Live == 4 && st[addrB].Live == 0
	})
	settled, settledAfter := time.Since(start), disconnects()
	// They stay: a few seconds more bring no disconnect.
	time.Sleep(5 * time.Second)
	st := status(t)
	t.Logf("settled on A in %v after %d disconnects; B: %q, %d refused sessions, state %s",
		settled.Round(10*time.Millisecond), settledAfter, st[addrB].Refusing, st[addrB].RefusedSessions, st[addrB].State)
	if n := disconnects(); n != settledAfter || !allUp() || st[addrA].Live != 4 {
		t.Fatalf("after settling: %d disconnects (%d at settling), A holds %d; want the clients to stay on A", n, settledAfter, st[addrA].Live)
	}
	if settledAfter > 6 {
		t.Errorf("%d disconnects before settling, want a few (the refused sessions that mark B refusing)", settledAfter)
	}
	if st[addrB].Refusing == "" || !strings.Contains(proxy.Log.String(), "upstream refuses sessions; trying it last") {
		t.Errorf("B not reported as refusing sessions: %+v", st[addrB])
	}

	// B restarts clean (btcd keeps its bans in memory): connections move
	// back, one per rebalance round, until the spread is even.
	b.Kill()
	restart := time.Now()
	b = startBtcd(t, bin, tmp, "B", addrB, bFlags...)
	waitFor(t, "a connection to move back to B", func() bool { return status(t)[addrB].Live >= 1 })
	firstMove := time.Since(restart)
	waitFor(t, "the spread to even out", func() bool {
		st := status(t)
		return allUp() && st[addrA].Live == 2 && st[addrB].Live == 2
	})
	evened := time.Since(restart)
	time.Sleep(5 * time.Second) // and stay so
	st = status(t)
	moves := strings.Count(proxy.Log.String(), `msg="answers again; moving a connection"`) +
		strings.Count(proxy.Log.String(), `msg="spread uneven; moving a connection"`)
	t.Logf("B restarted: first connection back on B after %v, spread even (2 and 2) after %v, %d moves, %d disconnects since the restart",
		firstMove.Round(10*time.Millisecond), evened.Round(10*time.Millisecond), moves, disconnects()-settledAfter)
	if !strings.Contains(proxy.Log.String(), `msg="answers again; moving a connection"`) {
		t.Error(`no "answers again; moving a connection" line`)
	}
	if got := disconnects() - settledAfter; got != int64(moves) || moves != 2 {
		t.Errorf("%d disconnects and %d moves since B restarted, want 2 moves and a disconnect for each", got, moves)
	}
	if st[addrA].Live != 2 || st[addrB].Live != 2 || st[addrB].Refusing != "" {
		t.Errorf("after the moves: A %+v, B %+v", st[addrA], st[addrB])
	}
}

// startBtcd starts a btcd node in simnet listening on addr, with its data
// in tmp/name (kept across restarts), and waits until it listens.
func startBtcd(t *testing.T, bin, tmp, name, addr string, extra ...string) *testkit.Proc {
	t.Helper()
	home := filepath.Join(tmp, name)
	args := append([]string{"--simnet", "--norpc", "--nodnsseed", "--listen", addr,
		"--datadir", filepath.Join(home, "data"), "--logdir", filepath.Join(home, "logs"),
		"--configfile", filepath.Join(home, "btcd.conf"), "--debuglevel", "info"}, extra...)
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "btcd.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "btcd"), args...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	p := testkit.StartProc(t, cmd, nil)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("btcd %s:\n%s", name, p.Log.String())
		}
	})
	waitListening(t, addr)
	return p
}

// startProxy starts the pinproxy binary exe in front of upstreams (a
// comma-separated list) as every scenario runs it: a rebalance round
// every 2 s, test-connects running the check's exchange as
// docs/pinproxy.md gives it for simnet, and extra flags. It waits until
// the proxy listens, and logs the proxy's output if t fails.
func startProxy(t *testing.T, exe, upstreams string, extra ...string) *testkit.Proc {
	t.Helper()
	args := append([]string{"-listen", proxyAddr, "-admin", adminAddr, "-upstreams", upstreams,
		"-rebalance-interval", "2s", "-max-conns", "100",
		"-check-send", hex.EncodeToString(checkSend(t, wire.SimNet)),
		"-check-expect", hex.EncodeToString(checkExpect(wire.SimNet))}, extra...)
	p := testkit.StartProc(t, exec.Command(exe, args...), nil)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pinproxy:\n%s", p.Log.String())
		}
	})
	// Not a probe connection: it would hold one of a node's slots until
	// the node, which accepts only once its chain is loaded, closes it,
	// and least-used dialing would send the next client elsewhere
	// meanwhile.
	waitFor(t, "pinproxy to listen", func() bool {
		return strings.Contains(p.Log.String(), `msg="pinproxy listening"`)
	})
	return p
}

// clients hold a connection each through the proxy.
type clients []*client

// holdClients starts n clients, each holding a connection through the
// proxy and redialing a second after each disconnect, until t ends.
func holdClients(t *testing.T, n int) clients {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	cs := make(clients, n)
	for i := range cs {
		cl := &client{name: fmt.Sprint("c", i)}
		cs[i] = cl
		wg.Go(func() { cl.hold(ctx) })
	}
	return cs
}

// disconnects counts the sessions the clients have lost so far.
func (cs clients) disconnects() int64 {
	var n int64
	for _, cl := range cs {
		n += cl.disconnects.Load()
	}
	return n
}

// allUp reports whether every client holds a connection.
func (cs clients) allUp() bool {
	for _, cl := range cs {
		if !cl.up.Load() {
			return false
		}
	}
	return true
}

// get reads the proxy's admin path.
func get(t *testing.T, path string) *http.Response {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + adminAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// waitListening waits until addr accepts a connection.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	waitFor(t, addr+" to listen", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitForWithin(t, wait, what, cond)
}

// upstream is what the test reads of /status.
type upstream struct {
	Addr            string `json:"addr"`
	Live            int    `json:"live"`
	State           string `json:"state"`
	Refusing        string `json:"refusing"`
	RefusedSessions int64  `json:"refused_sessions"`
}

// status reads the proxy's /status, by upstream address.
func status(t *testing.T) map[string]upstream {
	t.Helper()
	resp := get(t, "/status")
	defer resp.Body.Close()
	var st struct {
		Upstreams []upstream `json:"upstreams"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	m := make(map[string]upstream)
	for _, u := range st.Upstreams {
		m[u.Addr] = u
	}
	return m
}

// client is a peer on btcd's peer package that connects through the
// proxy, like a light client pinned to full nodes.
type client struct {
	name        string
	addr        string       // where it connects; the proxy if empty
	up          atomic.Bool  // its handshake is done and it is connected
	disconnects atomic.Int64 // sessions that ended after a connect
	cur         atomic.Pointer[peer.Peer]
	pongs       atomic.Int64 // pongs received
}

// session connects once, completes the handshake, calls then (if not nil)
// and returns whether the handshake completed; the peer stays connected
// until the other side ends it.
func (cl *client) session(then func(*peer.Peer)) bool {
	p, ok := cl.connect()
	if ok && then != nil {
		then(p)
	}
	return ok
}

// connect dials the proxy and runs the handshake; the peer is returned
// connected (or being disconnected) with whether the handshake completed.
func (cl *client) connect() (*peer.Peer, bool) {
	verack := make(chan struct{})
	var once sync.Once
	cfg := &peer.Config{
		UserAgentName:    "btcdlab-" + cl.name,
		UserAgentVersion: "1",
		ChainParams:      &chaincfg.SimNetParams,
		DisableRelayTx:   true,
		TrickleInterval:  time.Second,
		AllowSelfConns:   true,
		Listeners: peer.MessageListeners{
			OnVerAck: func(*peer.Peer, *wire.MsgVerAck) { once.Do(func() { close(verack) }) },
			OnPong:   func(*peer.Peer, *wire.MsgPong) { cl.pongs.Add(1) },
		},
	}
	addr := cl.addr
	if addr == "" {
		addr = proxyAddr
	}
	p, err := peer.NewOutboundPeer(cfg, addr)
	if err != nil {
		return nil, false
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, false
	}
	p.AssociateConnection(conn)
	select {
	case <-verack:
		return p, true
	case <-disconnected(p):
	case <-time.After(30 * time.Second):
		p.Disconnect()
	}
	return p, false
}

// disconnected is closed once p has disconnected.
func disconnected(p *peer.Peer) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		p.WaitForDisconnect()
		close(done)
	}()
	return done
}

// hold keeps one connection through the proxy until ctx ends, redialing a
// second after each disconnect.
func (cl *client) hold(ctx context.Context) {
	for ctx.Err() == nil {
		p, ok := cl.connect()
		if p != nil {
			cl.cur.Store(p)
			cl.up.Store(ok)
			select {
			case <-disconnected(p):
				cl.disconnects.Add(1)
			case <-ctx.Done():
				p.Disconnect()
				p.WaitForDisconnect()
			}
			cl.up.Store(false)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
