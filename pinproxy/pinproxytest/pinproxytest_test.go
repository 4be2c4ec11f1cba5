package pinproxytest_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// A down node's port is refused and cannot be taken by another listener
// until the node starts; then the node listens there, and after a Stop,
// with its closed connections in TIME_WAIT, it can start again.
func TestDownHoldsItsPort(t *testing.T) {
	n := pinproxytest.Down(t, "A", pinproxytest.Line)
	for range 2 { // once more after Stop: a node never started stays down
		if ln, err := net.Listen("tcp", n.Addr); err == nil {
			ln.Close()
			t.Fatalf("another listener took down node %s's port", n.Addr)
		}
		if c, err := net.Dial("tcp", n.Addr); !errors.Is(err, syscall.ECONNREFUSED) {
			if c != nil {
				c.Close()
			}
			t.Fatalf("dial to a down node: %v, want connection refused", err)
		}
		n.Stop()
	}
	for range 2 {
		n.Start()
		c, err := net.Dial("tcp", n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(c).ReadString('\n'); line != "A ping\n" {
			t.Fatalf("started node answered %q, %v", line, err)
		}
		n.Stop() // it closes c first: TIME_WAIT on the node's port
		c.Close()
		if c, err := net.Dial("tcp", n.Addr); err == nil {
			c.Close()
			t.Fatal("a stopped node answered")
		}
	}
}
