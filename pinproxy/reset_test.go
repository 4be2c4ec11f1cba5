package pinproxy_test

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// resetPair is a proxy in front of a listener the test accepts from
// itself, and one client through it with its upstream conn.
type resetPair struct {
	p                *pinproxy.Proxy
	log              *testkit.LogBuffer
	client, upstream *net.TCPConn
}

func newResetPair(t *testing.T, parkAfter time.Duration) resetPair {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	log, buf := testLogger(t)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{ln.Addr().String()}, RebalanceInterval: -1,
		ParkAfter: parkAfter, LogConnections: true, Logger: log})
	addr := serve(t, p)
	c := mustDial(t, addr).(*net.TCPConn)
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	u, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	rp := resetPair{p: p, log: buf, client: c, upstream: u.(*net.TCPConn)}
	// A byte each way, so the pair is established end to end.
	rp.roundTrip(t)
	return rp
}

func (rp resetPair) roundTrip(t *testing.T) {
	t.Helper()
	b := make([]byte, 1)
	for _, d := range [][2]*net.TCPConn{{rp.client, rp.upstream}, {rp.upstream, rp.client}} {
		d[1].SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
		if _, err := d[0].Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(d[1], b); err != nil {
			t.Fatal(err)
		}
	}
}

// waitParked waits until the pair's connection has parked.
func (rp resetPair) waitParked(t *testing.T) {
	t.Helper()
	testkit.WaitFor(t, "the connection to park", func() bool { return pinproxy.ParkedForTest(rp.p) == 1 })
}

// readUntilEnd reads c to its end and returns the bytes and the error
// that ended it (nil for EOF).
func readUntilEnd(t *testing.T, c net.Conn) (string, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
	b, err := io.ReadAll(c)
	if pinproxytest.IsTimeout(err) {
		t.Fatalf("the stream did not end within %v", pinproxytest.WaitFor)
	}
	return string(b), err
}

// waitLine waits for the connection's end line and returns it.
func (rp resetPair) waitLine(t *testing.T) string {
	t.Helper()
	var line string
	testkit.WaitFor(t, "the connection ended line", func() bool {
		for _, l := range strings.Split(rp.log.String(), "\n") {
			if strings.Contains(l, `msg="connection ended"`) {
				line = l
				return true
			}
		}
		return false
	})
	return line
}

// A reset on one side reaches the other side as a reset, after the bytes
// sent before it, in both directions, parked or not; the line says error
// and why.
func TestResetPassedOn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		park   bool
		resets string // "upstream" or "client"
	}{
		{"upstream resets", false, "upstream"},
		{"client resets", false, "client"},
		{"upstream resets while parked", true, "upstream"},
		{"client resets while parked", true, "client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parkAfter := time.Duration(-1)
			if tc.park {
				parkAfter = time.Millisecond
			}
			rp := newResetPair(t, parkAfter)
			if tc.park {
				rp.waitParked(t)
			}
			from, to := rp.upstream, rp.client
			if tc.resets == "client" {
				from, to = rp.client, rp.upstream
			}
			if _, err := from.Write([]byte("last words")); err != nil {
				t.Fatal(err)
			}
			from.SetLinger(0)
			from.Close()
			got, err := readUntilEnd(t, to)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("the other side read %q, then %v; want the reset (ECONNRESET) passed on", got, err)
			}
			line := rp.waitLine(t)
			if !strings.Contains(line, "reason=error") || !strings.Contains(line, "connection reset by peer") {
				t.Errorf("line %q: want reason=error with the reset as err", line)
			}
		})
	}
}

// A clean close still ends in a clean close on the other side.
func TestCleanCloseStaysClean(t *testing.T) {
	rp := newResetPair(t, -1)
	rp.upstream.Write([]byte("bye"))
	rp.upstream.Close()
	got, err := readUntilEnd(t, rp.client)
	if err != nil || got != "bye" {
		t.Fatalf("client read %q, %v; want %q and EOF", got, err, "bye")
	}
	rp.client.Close()
	if line := rp.waitLine(t); !strings.Contains(line, `reason="upstream closed"`) || strings.Contains(line, "err=") {
		t.Errorf("line %q: want reason=\"upstream closed\" and no err", line)
	}
}
