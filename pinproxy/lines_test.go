package pinproxy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// Every connection's line is logged by the time Shutdown returns, queued
// or not: a burst of short connections, then Shutdown, loses none.
func TestEveryLineLoggedByShutdown(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Echo)
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr}, RebalanceInterval: -1, LogConnections: true, Logger: log})
	ln, served := listenAndServe(t, p)
	const n = 200
	for range n {
		c := mustDial(t, ln.Addr().String())
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := c.Read(b); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-served
	if got := strings.Count(logs.String(), `msg="connection ended"`); got != n {
		t.Fatalf("%d connection lines after Shutdown, want %d", got, n)
	}
}
