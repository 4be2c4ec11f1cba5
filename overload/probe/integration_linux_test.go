package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

func newProbe(t testing.TB, cfg Config) *Probe {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func read(t testing.TB, p *Probe) overload.Reading {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := p.Read(ctx)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return r
}

func TestReadFirstAndSecond(t *testing.T) {
	p := newProbe(t, Config{Node: "n1"})
	r := read(t, p)
	if r.Version != overload.ReadingVersion || r.Node != "n1" || r.At.IsZero() {
		t.Fatalf("first reading header: %+v", r)
	}
	for _, in := range []overload.Input{overload.InputListenDrops, overload.InputBandwidth} {
		if !slices.Contains(r.Missing, in) {
			t.Errorf("first reading: %s not missing: %v", in, r.Missing)
		}
	}
	if !slices.Contains(r.Notes, noteFirst) {
		t.Errorf("first reading notes %q lack %q", r.Notes, noteFirst)
	}
	if r.MemoryUsedPercent <= 0 || r.MemoryUsedPercent > 100 || r.CPUs < 1 || r.Load15 < 0 {
		t.Errorf("first reading: memory %v, cpus %d, load %v", r.MemoryUsedPercent, r.CPUs, r.Load15)
	}
	r2 := read(t, p)
	if slices.Contains(r2.Missing, overload.InputListenDrops) || slices.Contains(r2.Notes, noteFirst) {
		t.Errorf("second reading: missing %v, notes %q", r2.Missing, r2.Notes)
	}
	if !r2.At.After(r.At) {
		t.Errorf("second reading at %v, not after %v", r2.At, r.At)
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "proc root missing", cfg: Config{ProcRoot: filepath.Join(t.TempDir(), "nope")}},
		{name: "netns missing", cfg: Config{NetNS: filepath.Join(t.TempDir(), "nope")}},
		{name: "netns not a namespace", cfg: Config{NetNS: "testdata/proc/meminfo"}},
		{name: "netns of another kind", cfg: Config{NetNS: "/proc/self/ns/uts"}},
		{name: "negative timeout", cfg: Config{Timeout: -time.Second}},
		{name: "zero link speed", cfg: Config{LinkSpeedMbps: map[string]uint64{"eth0": 0}}},
	}
	for _, tt := range tests {
		if p, err := New(tt.cfg); err == nil {
			p.Close()
			t.Errorf("%s: New succeeded", tt.name)
		}
	}
	p := newProbe(t, Config{})
	p.Close()
	if _, err := p.Read(context.Background()); err == nil {
		t.Error("Read after Close succeeded")
	}
}

func TestReadProcRootUnreadable(t *testing.T) {
	p := newProbe(t, Config{ProcRoot: t.TempDir()})
	if _, err := p.Read(context.Background()); err == nil {
		t.Fatal("Read of an empty proc root succeeded")
	}
}

// TestIntegrationListenOverflow: a listener with backlog 1 that never
// accepts, flooded with connects, shows in the next reading's listen
// drops and as a full accept queue.
func TestIntegrationListenOverflow(t *testing.T) {
	testkit.NeedRoot(t, "ip")
	_, nsPath := newNetNS(t)
	p := newProbe(t, Config{NetNS: nsPath})
	read(t, p)

	port := listenInNS(t, nsPath, 1)
	if err := connectInNS(t, nsPath, port, 20); err != nil {
		t.Fatal(err)
	}

	// Wait for the kernel to count the overflows in that namespace (it
	// does so as the SYNs arrive; this only guards against a slow box).
	testkit.WaitFor(t, "ListenOverflows ≥ 10 in the namespace", func() bool {
		var overflows uint64
		inNS(t, nsPath, func() error {
			proc, err := p.threadProc(mustThreadSelf(p))
			if err != nil {
				return err
			}
			overflows, _, err = listenCounters(proc)
			return err
		})
		return overflows >= 10
	})

	r := read(t, p)
	if slices.Contains(r.Missing, overload.InputListenDrops) || r.ListenDrops < 10 {
		t.Fatalf("reading after the flood: listen drops %d (missing %v, notes %q), want ≥ 10", r.ListenDrops, r.Missing, r.Notes)
	}
	want := fmt.Sprintf("127.0.0.1:%d", port)
	var found bool
	for _, l := range r.Listeners {
		if l.Addr != want {
			continue
		}
		found = true
		if l.Backlog != 1 || l.Queue < l.Backlog {
			t.Errorf("listener %s: queue %d, backlog %d; want backlog 1 and a full queue", want, l.Queue, l.Backlog)
		}
	}
	if !found {
		t.Errorf("listener %s not in %+v", want, r.Listeners)
	}
	t.Logf("listen drops %d, listeners %+v", r.ListenDrops, r.Listeners)
}

func mustThreadSelf(p *Probe) string {
	s, err := p.threadSelf()
	if err != nil {
		panic(err)
	}
	return s
}

// TestIntegrationConntrack: connections through an nftables `ct state`
// rule show in the namespace's conntrack entry count, and drops have
// deltas from the second reading on.
func TestIntegrationConntrack(t *testing.T) {
	testkit.NeedRoot(t, "ip", "nft")
	name, nsPath := newNetNS(t)
	trackConnections(t, name)
	p := newProbe(t, Config{NetNS: nsPath})
	r0 := read(t, p)
	if slices.Contains(r0.Missing, overload.InputConntrack) {
		t.Fatalf("first reading: conntrack missing: %q", r0.Notes)
	}
	if r0.ConntrackEntries != 0 || r0.ConntrackMax == 0 {
		t.Fatalf("fresh namespace: conntrack %d of %d, want 0 of a nonzero max", r0.ConntrackEntries, r0.ConntrackMax)
	}
	s := newSink(t, nsPath, "127.0.0.1:0")
	dialN(t, nsPath, s.ln.Addr().String(), 50)

	r := read(t, p)
	if r.ConntrackEntries < 50 {
		t.Fatalf("after 50 connections: conntrack entries %d, want ≥ 50 (notes %q)", r.ConntrackEntries, r.Notes)
	}
	if slices.Contains(r.Missing, overload.InputConntrackDrops) || r.ConntrackDrops != 0 {
		t.Fatalf("second reading: conntrack drops %d, missing %v, notes %q; want 0 and present", r.ConntrackDrops, r.Missing, r.Notes)
	}
	if n := notesWith(r.Notes, "nf_conntrack"); len(n) != 0 {
		t.Errorf("as root, drops came from procfs: %q", n)
	}
}

// TestIntegrationLinkBandwidth: traffic over a veth pair between two
// namespaces shows in that link's bits per second; the speed comes from a
// sysfs of the namespace, an operator's figure, or is unknown, never
// another namespace's.
func TestIntegrationLinkBandwidth(t *testing.T) {
	testkit.NeedRoot(t, "ip")
	nameA, pathA := newNetNS(t)
	nameB, pathB := newNetNS(t)
	run(t, "ip", "-n", nameA, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns", nameB)
	run(t, "ip", "-n", nameA, "addr", "add", "10.77.0.1/24", "dev", "veth0")
	run(t, "ip", "-n", nameB, "addr", "add", "10.77.0.2/24", "dev", "veth1")
	run(t, "ip", "-n", nameA, "link", "set", "veth0", "up")
	run(t, "ip", "-n", nameB, "link", "set", "veth1", "up")
	waitUp(t, nameA, "veth0")
	waitUp(t, nameB, "veth1")

	// A sysfs mounted from inside namespace A shows A's links.
	sysA := t.TempDir()
	inNS(t, pathA, func() error { return unix.Mount("sysfs", sysA, "sysfs", unix.MS_RDONLY, "") })
	t.Cleanup(func() {
		if err := unix.Unmount(sysA, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", sysA, err)
		}
	})

	probes := map[string]*Probe{
		"netns sysfs": newProbe(t, Config{NetNS: pathA, SysRoot: sysA}),
		"host sysfs":  newProbe(t, Config{NetNS: pathA}),
		"operator":    newProbe(t, Config{NetNS: pathA, SysRoot: sysA, LinkSpeedMbps: map[string]uint64{"veth0": 1000}}),
	}
	first := map[string]overload.Reading{}
	for k, p := range probes {
		first[k] = read(t, p)
	}

	const sent = 8 << 20
	s := newSink(t, pathB, "10.77.0.2:0")
	c := dialN(t, pathA, s.ln.Addr().String(), 1)[0]
	if _, err := c.Write(make([]byte, sent)); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	s.waitBytes(t, sent)

	for k, wantSpeed := range map[string]uint64{"netns sysfs": 10000, "host sysfs": 0, "operator": 1000} {
		r := read(t, probes[k])
		if len(r.Links) != 1 || r.Links[0].Name != "veth0" {
			t.Fatalf("%s: links %+v, want veth0 alone (notes %q)", k, r.Links, r.Notes)
		}
		l := r.Links[0]
		elapsed := r.At.Sub(first[k].At).Seconds()
		if bits := l.TxBitsPerSecond * elapsed; bits < 0.99*8*sent {
			t.Errorf("%s: veth0 sent %.0f bits by its rate, want ≥ %d", k, bits, 8*sent)
		}
		if l.RxBitsPerSecond <= 0 {
			t.Errorf("%s: veth0 received nothing (the ACKs)", k)
		}
		if l.SpeedMbps != wantSpeed {
			t.Errorf("%s: veth0 speed %d, want %d (notes %q)", k, l.SpeedMbps, wantSpeed, r.Notes)
		}
		if missing := slices.Contains(r.Missing, overload.InputBandwidth); missing != (wantSpeed == 0) {
			t.Errorf("%s: bandwidth missing = %v with speed %d (notes %q)", k, missing, wantSpeed, r.Notes)
		}
		if wantSpeed == 0 && len(notesWith(r.Notes, "veth0: speed unknown")) == 0 {
			t.Errorf("%s: no note on veth0's unknown speed: %q", k, r.Notes)
		}
		t.Logf("%s: %+v", k, l)
	}
}

// TestIntegrationWithoutNetAdmin: without CAP_NET_ADMIN the probe takes
// conntrack drops from procfs and says so.
func TestIntegrationWithoutNetAdmin(t *testing.T) {
	testkit.NeedRoot(t, "ip", "setpriv")
	if _, err := os.Stat("/proc/sys/net/netfilter/nf_conntrack_count"); err != nil {
		t.Skipf("skipping: needs the nf_conntrack module loaded: %v", err)
	}
	r := readWithout(t, "net_admin")
	if slices.Contains(r.Missing, overload.InputConntrackDrops) || len(notesWith(r.Notes, "CAP_NET_ADMIN")) == 0 {
		t.Fatalf("without CAP_NET_ADMIN: missing %v, notes %q; want drops from procfs and a note", r.Missing, r.Notes)
	}
	if r.MemoryUsedPercent <= 0 || slices.Contains(r.Missing, overload.InputListenDrops) {
		t.Fatalf("without CAP_NET_ADMIN lost procfs inputs: %+v", r)
	}
	t.Logf("notes: %q", r.Notes)
}

// TestIntegrationWithoutSysAdmin: a probe that may not enter its network
// namespace loses the network inputs, says why, and keeps procfs's.
func TestIntegrationWithoutSysAdmin(t *testing.T) {
	testkit.NeedRoot(t, "ip", "setpriv")
	r := readWithout(t, "sys_admin")
	for _, in := range []overload.Input{overload.InputConntrack, overload.InputConntrackDrops, overload.InputListenDrops, overload.InputBandwidth} {
		if !slices.Contains(r.Missing, in) {
			t.Errorf("without CAP_SYS_ADMIN: %s not missing (%v)", in, r.Missing)
		}
	}
	if len(notesWith(r.Notes, "CAP_SYS_ADMIN")) == 0 || r.MemoryUsedPercent <= 0 || slices.Contains(r.Missing, overload.InputMemory) {
		t.Fatalf("without CAP_SYS_ADMIN: %+v", r)
	}
}

// readWithout returns the second reading of a probe of a fresh namespace
// in a helper process (readWithoutCap) started without capability
// capName, e.g. "net_admin".
func readWithout(t *testing.T, capName string) overload.Reading {
	t.Helper()
	_, nsPath := newNetNS(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("setpriv", "--bounding-set=-"+capName, "--inh-caps=-"+capName, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=nocap", "NK_PROBE_NETNS="+nsPath)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper without CAP_%s: %v: %s", strings.ToUpper(capName), err, out)
	}
	var r overload.Reading
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	return r
}

// readWithoutCap is the helper process of the tests without a
// capability: two readings, the second printed as JSON.
func readWithoutCap() int {
	p, err := New(Config{NetNS: os.Getenv("NK_PROBE_NETNS")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer p.Close()
	var r overload.Reading
	for i := 0; i < 2; i++ {
		if r, err = p.Read(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}

// TestIntegrationConntrackFull: with the (host-global) table size at 100
// for a moment, 150 connects in a namespace that tracks them: the next
// reading counts the connections dropped. nf_conntrack_max is restored as
// soon as the drops show, and in t.Cleanup whatever happens.
func TestIntegrationConntrackFull(t *testing.T) {
	testkit.NeedRoot(t, "ip", "nft")
	name, nsPath := newNetNS(t)
	trackConnections(t, name)
	p := newProbe(t, Config{NetNS: nsPath})
	read(t, p)
	read(t, p)

	port := listenInNS(t, nsPath, 512)

	const maxPath = "/proc/sys/net/netfilter/nf_conntrack_max"
	old, err := os.ReadFile(maxPath)
	if err != nil {
		t.Skipf("skipping: no conntrack: %v", err)
	}
	restore := func() {
		if err := os.WriteFile(maxPath, old, 0o644); err != nil {
			t.Errorf("restore nf_conntrack_max to %s: %v", strings.TrimSpace(string(old)), err)
		}
	}
	t.Cleanup(restore)
	if err := os.WriteFile(maxPath, []byte("100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = connectInNS(t, nsPath, port, 150) // connects the full table drops fail
	testkit.WaitFor(t, "conntrack drops ≥ 50 in the namespace", func() bool {
		var drops uint64
		inNS(t, nsPath, func() error {
			m, err := conntrackStatFile(context.Background(), "/proc/thread-self/net/stat/nf_conntrack")
			for _, v := range m {
				drops += v
			}
			return err
		})
		return drops >= 50
	})
	restore()

	r := read(t, p)
	if slices.Contains(r.Missing, overload.InputConntrackDrops) || r.ConntrackDrops < 50 {
		t.Fatalf("reading after a full table: drops %d, missing %v, notes %q; want ≥ 50", r.ConntrackDrops, r.Missing, r.Notes)
	}
	t.Logf("conntrack %d of %d, %d dropped", r.ConntrackEntries, r.ConntrackMax, r.ConntrackDrops)
}

// TestIntegrationLinkReplaced: a link deleted and made again under the
// same name gives no rate for one reading (its counters restarted), and a
// link that is down is left out.
func TestIntegrationLinkReplaced(t *testing.T) {
	testkit.NeedRoot(t, "ip")
	name, nsPath := newNetNS(t)
	up := func() {
		run(t, "ip", "-n", name, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
		run(t, "ip", "-n", name, "link", "set", "veth0", "up")
		run(t, "ip", "-n", name, "link", "set", "veth1", "up")
		waitUp(t, name, "veth0", "veth1")
	}
	up()
	p := newProbe(t, Config{NetNS: nsPath, LinkSpeedMbps: map[string]uint64{"veth0": 100, "veth1": 100}})
	read(t, p)
	if r := read(t, p); len(r.Links) != 2 || slices.Contains(r.Missing, overload.InputBandwidth) {
		t.Fatalf("two veths up: links %+v, missing %v, notes %q", r.Links, r.Missing, r.Notes)
	}
	run(t, "ip", "-n", name, "link", "del", "veth0")
	up()
	r := read(t, p)
	if len(r.Links) != 0 || len(notesWith(r.Notes, "veth0: replaced")) == 0 || len(notesWith(r.Notes, "veth1: replaced")) == 0 {
		t.Fatalf("after replacing the pair: links %+v, notes %q; want none and notes", r.Links, r.Notes)
	}
	if !slices.Contains(r.Missing, overload.InputBandwidth) {
		t.Fatalf("after replacing the pair: bandwidth not missing: %v", r.Missing)
	}
	run(t, "ip", "-n", name, "link", "set", "veth1", "down") // veth0 loses its carrier too
	waitDown(t, name, "veth0", "veth1")
	if r := read(t, p); len(r.Links) != 0 || len(notesWith(r.Notes, "no link is up")) == 0 {
		t.Fatalf("with the pair down: links %+v, notes %q", r.Links, r.Notes)
	}
	run(t, "ip", "-n", name, "link", "set", "veth1", "up")
	waitUp(t, name, "veth0", "veth1")
	read(t, p)
	if r := read(t, p); len(r.Links) != 2 {
		t.Fatalf("pair up again: links %+v, notes %q", r.Links, r.Notes)
	}
}
