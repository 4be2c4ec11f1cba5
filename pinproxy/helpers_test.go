package pinproxy_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// testLogger logs at debug level into a buffer that is printed if the
// test fails.
func testLogger(t testing.TB) (*slog.Logger, *testkit.LogBuffer) {
	buf := &testkit.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("proxy log:\n%s", buf)
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// serve starts p on a loopback listener and shuts it down at cleanup,
// checking that Serve returned ErrProxyClosed.
func serve(t testing.TB, p *pinproxy.Proxy) string {
	t.Helper()
	ln, served := listenAndServe(t, p)
	t.Cleanup(func() { shutdown(t, p, served) })
	return ln.Addr().String()
}

// listenAndServe starts p on a loopback listener and returns it with
// Serve's result; the test shuts p down itself.
func listenAndServe(t testing.TB, p *pinproxy.Proxy) (net.Listener, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, serveOn(p, ln)
}

// serveOn runs p.Serve(ln) and returns its result.
func serveOn(p *pinproxy.Proxy, ln net.Listener) <-chan error {
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	return served
}

// shutdown shuts p down, checking that the live connections drained
// within pinproxytest.WaitFor and that Serve returned ErrProxyClosed.
func shutdown(t testing.TB, p *pinproxy.Proxy, served <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pinproxytest.WaitFor)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, pinproxy.ErrProxyClosed) {
		t.Errorf("Serve returned %v, want ErrProxyClosed", err)
	}
}

// newProxy makes a proxy for a test; with PINPROXY_TEST_PARK set, its
// connections park as that says unless cfg turns parking off; with
// PINPROXY_TEST_GOROUTINES=1, goroutines relay them.
func newProxy(t testing.TB, cfg pinproxy.Config) *pinproxy.Proxy {
	t.Helper()
	if d, ok := pinproxy.ForcedParkForTest(); ok && cfg.ParkAfter >= 0 {
		cfg.ParkAfter = d
	}
	pinproxy.ForcedGoroutinesForTest(&cfg)
	p, err := pinproxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func stat(p *pinproxy.Proxy, addr string) pinproxy.UpstreamStats {
	for _, s := range p.Stats() {
		if s.Addr == addr {
			return s
		}
	}
	return pinproxy.UpstreamStats{}
}

// mustDial connects to addr; the conn is closed at cleanup.
func mustDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fakeClock is a clock for SetClockForTest that moves only when told.
type fakeClock struct{ off atomic.Int64 }

var clockBase = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func (c *fakeClock) now() time.Time          { return clockBase.Add(time.Duration(c.off.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.off.Add(int64(d)) }
