package pinproxy_test

import (
	"io"
	"net"
	"testing"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// BenchmarkConnection measures one client's whole life through the proxy
// on loopback: connect, the least-used choice and upstream dial, one byte
// each way, close. Throughput of the data path is measured by
// internal/tools/proxybench.
func BenchmarkConnection(b *testing.B) {
	up := pinproxytest.New(b, "A", pinproxytest.Echo)
	p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{up.Addr}, RebalanceInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	addr := serve(b, p)
	buf := make([]byte, 1)
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
