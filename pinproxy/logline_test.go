package pinproxy

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// addrConn is a net.Conn with addresses only, for a connection's log line.
type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// testConn is a connection from 127.0.0.1:54321 to p's first upstream
// that began 14.2 s ago.
func testConn(p *Proxy) *conn {
	client := addrConn{remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 54321}}
	return &conn{client: client, up: p.upstreams[0], start: time.Now().Add(-14200 * time.Millisecond)}
}

// endConn logs the end of c through p, as finish does when a connection's
// copying ends.
func endConn(p *Proxy, c *conn, r spliceResult) {
	p.handlers.Add(1)
	p.active.Add(1)
	p.finish(c, r)
}

// A connection's line allocates the client's address and the record's
// sixth attribute, nothing else; with the line off it costs nothing.
func TestConnectionLineAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("skipping: the race detector allocates on its own")
	}
	for _, tt := range []struct {
		logConnections bool
		max            float64
	}{{true, 2}, {false, 0}} {
		p, err := New(Config{Upstreams: []string{"127.0.0.1:9"}, LogConnections: tt.logConnections,
			Logger: slog.New(slog.NewTextHandler(discardWriter{}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		if err != nil {
			t.Fatal(err)
		}
		r := spliceResult{up: 1, down: 2, first: sideClient}
		c := testConn(p)
		if n := testing.AllocsPerRun(1000, func() { endConn(p, c, r) }); n > tt.max {
			t.Errorf("LogConnections %v: %v allocations a line, want at most %v", tt.logConnections, n, tt.max)
		}
	}
}

type discardWriter struct{}

func (discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// The line names the client as its address prints, and rounds the
// duration to what a person reads.
func TestConnectionLine(t *testing.T) {
	var buf bytes.Buffer
	p, err := New(Config{Upstreams: []string{"127.0.0.1:9"}, LogConnections: true,
		Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	endConn(p, testConn(p), spliceResult{up: 1, down: 2, first: sideClient})
	want := `msg="connection ended" client=127.0.0.1:54321 upstream=127.0.0.1:9 duration=14s bytes_sent=1 bytes_received=2 reason="client closed"`
	if got := strings.TrimSpace(buf.String()); !strings.HasSuffix(got, want) {
		t.Errorf("line %q\nwant it to end %q", got, want)
	}
}

func TestRoundForLog(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{1234 * time.Nanosecond, "1µs"},
		{1234567 * time.Nanosecond, "1ms"},
		{1560 * time.Millisecond, "1.6s"},
		{14200 * time.Millisecond, "14s"},
		{732*time.Hour + 56*time.Minute + 31*time.Second, "732h57m0s"},
	} {
		if got := roundForLog(tt.d).String(); got != tt.want {
			t.Errorf("roundForLog(%v) = %s, want %s", tt.d, got, tt.want)
		}
	}
}

func TestAppendAddr(t *testing.T) {
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 443, Zone: "eth0"},
		&net.UnixAddr{Name: "/run/x", Net: "unix"},
	} {
		if got := string(appendAddr(nil, a)); got != a.String() {
			t.Errorf("appendAddr(%v) = %q, want %q", a, got, a.String())
		}
	}
}

func BenchmarkConnectionLine(b *testing.B) {
	p, err := New(Config{Upstreams: []string{"127.0.0.1:9"}, LogConnections: true,
		Logger: slog.New(slog.NewTextHandler(discardWriter{}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		b.Fatal(err)
	}
	c := testConn(p)
	r := spliceResult{up: 1, down: 2, first: sideClient}
	b.ReportAllocs()
	for b.Loop() {
		endConn(p, c, r)
	}
}
