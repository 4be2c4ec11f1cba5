package pinproxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// greeter speaks a protocol in which the client says "hello" and the node
// answers with its greeting, as a P2P node answers a version message
// with its own.
func greeter(greeting string) pinproxytest.Handler {
	return func(n *pinproxytest.Node, c net.Conn) {
		r := bufio.NewReader(c)
		if line, err := r.ReadString('\n'); err != nil || line != "hello\n" {
			return
		}
		io.WriteString(c, greeting+" "+n.Name+"\n")
		pinproxytest.Line(n, readerConn{c, r})
	}
}

// readerConn is a conn whose reads go through r.
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// With CheckSend and CheckExpect, a health check is an exchange: a node
// that accepts connections but answers wrongly, closes the session, or
// says nothing within CheckTimeout fails it, and only the node that
// answers as expected is up.
func TestCheckExchange(t *testing.T) {
	good := pinproxytest.New(t, "good", greeter("HELLO"))
	wrong := pinproxytest.New(t, "wrong", greeter("GO AWAY"))
	closes := pinproxytest.New(t, "closes", func(*pinproxytest.Node, net.Conn) {})
	silent := pinproxytest.New(t, "silent", func(_ *pinproxytest.Node, c net.Conn) { io.Copy(io.Discard, c) })
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams:     []string{good.Addr, wrong.Addr, closes.Addr, silent.Addr},
		CheckInterval: 50 * time.Millisecond, CheckTimeout: 100 * time.Millisecond, CheckFall: 1,
		CheckSend: []byte("hello\n"), CheckExpect: []byte("HELLO "),
		RebalanceInterval: -1, Logger: log,
	})
	serve(t, p)
	testkit.WaitFor(t, "one up, three down", func() bool {
		return stat(p, good.Addr).State == "up" && stat(p, wrong.Addr).State == "down" &&
			stat(p, closes.Addr).State == "down" && stat(p, silent.Addr).State == "down"
	})
	for _, tt := range []struct {
		node *pinproxytest.Node
		want string
	}{
		{wrong, `check: reply 474f20415741, want 48454c4c4f20`}, // "GO AWA", "HELLO "
		{closes, "check: 0 of the 6 bytes expected, then the upstream ended the session: "},
		{silent, "check: 0 of the 6 bytes expected within 100ms: "},
	} {
		if got := stat(p, tt.node.Addr).LastError; !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s: last error %q, want %q…", tt.node.Name, got, tt.want)
		}
	}
	if got := stat(p, closes.Addr).RefusedSessions; got == 0 {
		t.Errorf("closes: no refused session counted for checks it closed at once")
	}
}

// A rebalance round's test-connect is the exchange too: an idle node that
// accepts connections but does not answer the exchange gets no move.
func TestRebalanceCheckExchange(t *testing.T) {
	busy := pinproxytest.New(t, "busy", greeter("HELLO"))
	idle := pinproxytest.New(t, "idle", greeter("GO AWAY"))
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams: []string{busy.Addr}, RebalanceInterval: -1, Logger: log,
		CheckSend: []byte("hello\n"), CheckExpect: []byte("HELLO "),
	})
	addr := serve(t, p)
	for i := range 2 {
		c := mustDial(t, addr)
		fmt.Fprintf(c, "hello\n")
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "HELLO busy\n" {
			t.Fatalf("client %d: %q, %v", i, line, err)
		}
	}
	if err := p.SetUpstreams([]string{busy.Addr, idle.Addr}); err != nil {
		t.Fatal(err)
	}
	if err := p.Rebalance(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Totals().Moves != 0 {
		t.Fatal("a round moved a connection to a node that failed the exchange")
	}
	if !strings.Contains(logs.String(), `msg="idle node still does not answer; nothing moved"`) || !strings.Contains(logs.String(), "check: reply") {
		t.Error("the round did not log the failed exchange")
	}
}
