package pinproxy

import (
	"bytes"
	"errors"
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

// NewLogHandler's lines are slog's text handler's, byte for byte, whether
// the proxy writes them itself or slog does; writing one allocates
// nothing.
func TestLogHandlerLineIsSlogs(t *testing.T) {
	var mine, slogs bytes.Buffer
	p, err := New(Config{Upstreams: []string{"127.0.0.1:9"}, LogConnections: true,
		Logger: slog.New(NewLogHandler(&mine, slog.LevelInfo))})
	if err != nil {
		t.Fatal(err)
	}
	if p.lineOut == nil {
		t.Fatal("the proxy did not take NewLogHandler's writer")
	}
	ref, err := New(Config{Upstreams: []string{"127.0.0.1:9"}, LogConnections: true,
		Logger: slog.New(slog.NewTextHandler(&slogs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 3, 4, 5, 678901234, time.UTC)
	var buf []byte
	for i, tt := range []struct {
		client   net.Addr
		upstream string
		lasted   time.Duration
		r        spliceResult
		reason   endReason
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 54321}, "127.0.0.1:9", 14200 * time.Millisecond, spliceResult{up: 1, down: 2}, endClient},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443}, "[2001:db8::2]:9333", 999 * time.Microsecond, spliceResult{}, endClosed},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 443, Zone: "eth 0"}, "eu-01:9333", 0, spliceResult{up: 1 << 40}, endRebalanced},
		{&net.UnixAddr{Name: "/run/a b", Net: "unix"}, "a=b", 732*time.Hour + 56*time.Minute, spliceResult{down: -1}, endDrained},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}, "", 3 * time.Nanosecond, spliceResult{err: net.ErrClosed}, endUpstream},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}, "x", time.Second, spliceResult{err: errors.New("read: connection reset")}, endError},
	} {
		for _, px := range []*Proxy{p, ref} {
			e := endLine{
				c:      &conn{client: addrConn{remote: tt.client}, up: &upstream{addr: tt.upstream}, start: at.Add(-tt.lasted)},
				r:      tt.r,
				reason: tt.reason,
				level:  slog.LevelInfo,
				at:     at.Add(time.Duration(i) * 1234567 * time.Microsecond),
			}
			buf = px.writeEnd(buf, &e)
		}
	}
	if mine.String() != slogs.String() {
		t.Errorf("lines written by hand:\n%s\nslog's:\n%s", mine.String(), slogs.String())
	}

	if raceEnabled {
		t.Skip("skipping the allocation count: the race detector allocates on its own")
	}
	p.log = slog.New(NewLogHandler(discardWriter{}, slog.LevelInfo))
	p.lineOut = &p.log.Handler().(*logHandler).out
	e := endLine{c: testConn(p), r: spliceResult{up: 1, down: 2, first: sideClient}, reason: endClient, level: slog.LevelInfo, at: time.Now()}
	if n := testing.AllocsPerRun(1000, func() { buf = p.writeEnd(buf, &e) }); n != 0 {
		t.Errorf("%v allocations a line written by hand, want 0", n)
	}
}

// A connection's end, queued for lineLoop, allocates nothing either.
func TestConnectionEndQueuedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("skipping: the race detector allocates on its own")
	}
	p, err := New(Config{Upstreams: []string{"127.0.0.1:9"}, LogConnections: true,
		Logger: slog.New(NewLogHandler(discardWriter{}, slog.LevelInfo))})
	if err != nil {
		t.Fatal(err)
	}
	p.startLines()
	defer p.stopLines()
	c := testConn(p)
	r := spliceResult{up: 1, down: 2, first: sideClient}
	if n := testing.AllocsPerRun(1000, func() { endConn(p, c, r) }); n != 0 {
		t.Errorf("%v allocations a connection's end, want 0", n)
	}
}

// needsQuoting is slog's: a value it quotes, appendTextString quotes.
func FuzzAppendTextString(f *testing.F) {
	for _, s := range []string{"", "a", "a b", "a=b", `a"b`, `a\b`, "a\tb", "é", "\u00a0", "\xff", "a\x7fb", "[::1]:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var buf bytes.Buffer
		slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if len(a.Key) > 0 && a.Key != "k" {
				return slog.Attr{}
			}
			return a
		}})).Info("", "k", s)
		want := strings.TrimSuffix(strings.TrimPrefix(buf.String(), "k="), "\n")
		if got := string(appendTextString(nil, s)); got != want {
			t.Fatalf("appendTextString(%q) = %s, want %s", s, got, want)
		}
	})
}
