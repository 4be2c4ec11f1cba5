package probe

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// TestIntegrationLinkBytes: the bytes ReadLinkBytes gives for a veth,
// summed over readings, equal the growth of the kernel's own counters
// for it (`ip -s link`) between the first reading and the last, to the
// byte: they are those counters' growth, not a rate times a time. The
// veth's peer is in another namespace with no address, so the only
// packets on the link are the test's (IPv6 off, the neighbour entry
// static: no router solicitation, no ARP).
func TestIntegrationLinkBytes(t *testing.T) {
	testkit.NeedRoot(t, "ip")
	a, aPath := newNetNS(t)
	b, _ := newNetNS(t)
	for _, ns := range []string{a, b} {
		run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	run(t, "ip", "-n", a, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns", b)
	run(t, "ip", "-n", a, "addr", "add", "10.77.0.1/24", "dev", "veth0")
	run(t, "ip", "-n", b, "link", "set", "veth1", "up")
	run(t, "ip", "-n", a, "link", "set", "veth0", "up")
	waitUp(t, a, "veth0")
	var peer []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal([]byte(run(t, "ip", "-n", b, "-j", "link", "show", "veth1")), &peer); err != nil || len(peer) != 1 {
		t.Fatalf("veth1's address: %v %s", err, peer)
	}
	run(t, "ip", "-n", a, "neigh", "add", "10.77.0.2", "lladdr", peer[0].Address, "dev", "veth0", "nud", "permanent")

	var conn *net.UDPConn
	inNS(t, aPath, func() (err error) {
		conn, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: 9})
		return err
	})
	defer conn.Close()

	p := newProbe(t, Config{NetNS: aPath, LinkSpeedMbps: map[string]uint64{"veth0": 1000}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	readBytes := func() (rx, tx uint64) {
		t.Helper()
		_, moved, err := p.ReadLinkBytes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range moved {
			if m.Name == "veth0" {
				rx, tx = m.RxBytes, m.TxBytes
			}
		}
		return rx, tx
	}
	kernel := func() (rx, tx uint64) {
		t.Helper()
		var links []struct {
			Stats64 struct {
				RX struct{ Bytes uint64 } `json:"rx"`
				TX struct{ Bytes uint64 } `json:"tx"`
			} `json:"stats64"`
		}
		if err := json.Unmarshal([]byte(run(t, "ip", "-n", a, "-s", "-j", "link", "show", "veth0")), &links); err != nil || len(links) != 1 {
			t.Fatalf("ip -s link: %v", err)
		}
		return links[0].Stats64.RX.Bytes, links[0].Stats64.TX.Bytes
	}

	readBytes() // the first: no bytes yet
	rx0, tx0 := kernel()
	var sumRx, sumTx uint64
	payload := make([]byte, 1000)
	for i := range 5 {
		for range 100 * (i + 1) {
			if _, err := conn.Write(payload); err != nil {
				t.Fatal(err)
			}
		}
		rx, tx := readBytes()
		sumRx, sumTx = sumRx+rx, sumTx+tx
	}
	rx1, tx1 := kernel()
	t.Logf("sent 1,500 datagrams of 1,000 bytes: kernel tx +%d rx +%d, readings tx %d rx %d", tx1-tx0, rx1-rx0, sumTx, sumRx)
	if sumTx != tx1-tx0 || sumRx != rx1-rx0 {
		t.Errorf("readings' bytes tx %d rx %d, kernel's growth tx %d rx %d", sumTx, sumRx, tx1-tx0, rx1-rx0)
	}
	if sumTx < 1500*1000 {
		t.Errorf("readings' tx %d, less than the 1,500,000 bytes of payload sent", sumTx)
	}
}
