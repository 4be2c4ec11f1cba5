package pinproxy_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// hiddenTCP hides *net.TCPConn's ReadFrom and WriteTo, so the proxy copies
// with plain io.Copy, but keeps CloseWrite.
type hiddenTCP struct{ net.Conn }

func (h hiddenTCP) CloseWrite() error { return h.Conn.(*net.TCPConn).CloseWrite() }

func hiddenDial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return hiddenTCP{c}, nil
}

var dialers = []struct {
	name string
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}{
	{"TCPConn", nil},
	{"other net.Conn", hiddenDial},
}

// A client that shuts down its write side still receives the upstream's
// reply.
func TestHalfCloseFromClient(t *testing.T) {
	for _, d := range dialers {
		t.Run(d.name, func(t *testing.T) {
			up := pinproxytest.New(t, "R", pinproxytest.Reply)
			p := newProxy(t, pinproxy.Config{Upstreams: []string{up.Addr}, RebalanceInterval: -1, DialContext: d.dial})
			c := mustDial(t, serve(t, p)).(*net.TCPConn)
			c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
			if _, err := io.WriteString(c, "abc"); err != nil {
				t.Fatal(err)
			}
			if err := c.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "reply:cba" {
				t.Fatalf("got %q, want the reply to the half-closed request", got)
			}
			c.Close()
			testkit.WaitFor(t, "the connection to end", func() bool { return p.Stats()[0].Live == 0 })
			if s := p.Stats()[0]; s.BytesSent != 3 || s.BytesReceived != 9 {
				t.Errorf("bytes up/down = %d/%d, want 3/9", s.BytesSent, s.BytesReceived)
			}
		})
	}
}

// An upstream that shuts down its write side still receives what the
// client sends afterwards.
func TestHalfCloseFromUpstream(t *testing.T) {
	for _, d := range dialers {
		t.Run(d.name, func(t *testing.T) {
			got := make(chan string, 1)
			up := pinproxytest.New(t, "U", func(_ *pinproxytest.Node, c net.Conn) {
				io.WriteString(c, "bye")
				c.(*net.TCPConn).CloseWrite()
				b, _ := io.ReadAll(c)
				got <- string(b)
			})
			p := newProxy(t, pinproxy.Config{Upstreams: []string{up.Addr}, RebalanceInterval: -1, DialContext: d.dial})
			c := mustDial(t, serve(t, p))
			c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
			b, err := io.ReadAll(c)
			if err != nil || string(b) != "bye" {
				t.Fatalf("client read %q, %v; want the upstream's bye, then EOF", b, err)
			}
			if _, err := io.WriteString(c, "still here"); err != nil {
				t.Fatal(err)
			}
			c.Close()
			select {
			case s := <-got:
				if s != "still here" {
					t.Fatalf("upstream read %q after its half-close", s)
				}
			case <-time.After(pinproxytest.WaitFor):
				t.Fatal("upstream never saw the end of the client's stream")
			}
		})
	}
}
