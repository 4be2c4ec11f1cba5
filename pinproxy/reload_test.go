package pinproxy_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// A reload: the added upstream takes new clients at once, the removed one
// takes none and keeps its live connections, and a bad list changes
// nothing.
func TestSetUpstreams(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr}, RebalanceInterval: -1, Logger: log})
	addr := serve(t, p)
	c1, _ := pinproxytest.Dial(t, addr, "c1")
	c2, _ := pinproxytest.Dial(t, addr, "c2")

	err := p.SetUpstreams([]string{b.Addr, "bad host:1"})
	var ue *pinproxy.UpstreamError
	if !errors.As(err, &ue) || ue.Index != 2 {
		t.Fatalf("SetUpstreams with a bad entry: %v, want an UpstreamError for entry 2", err)
	}
	if err := p.SetUpstreams(nil); !errors.Is(err, pinproxy.ErrNoUpstreams) {
		t.Fatalf("SetUpstreams(nil) = %v, want ErrNoUpstreams", err)
	}
	if s := p.Stats(); len(s) != 1 || s[0].Addr != a.Addr || s[0].Live != 2 {
		t.Fatalf("a bad list changed the upstreams: %+v", s)
	}

	if err := p.SetUpstreams([]string{b.Addr}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c3", "c4"} {
		if _, on := pinproxytest.Dial(t, addr, id); on != "B" {
			t.Fatalf("%s landed on %s after A was removed, want B", id, on)
		}
	}
	for _, cl := range []*pinproxytest.Client{c1, c2} {
		if on, err := cl.Ping(); err != nil || on != "A" {
			t.Fatalf("%s on the removed upstream: %q, %v; want still on A", cl.ID, on, err)
		}
	}
	s := p.Stats()
	if len(s) != 2 || s[0].Addr != b.Addr || s[1].Addr != a.Addr || !s[1].Removed || s[1].Live != 2 {
		t.Fatalf("Stats after the reload: %+v, want B, then A removed with 2 live", s)
	}
	c1.Conn.Close()
	c2.Conn.Close()
	testkit.WaitFor(t, "the removed upstream to leave Stats", func() bool { return len(p.Stats()) == 1 })

	// Added back, it keeps nothing of before but takes clients again.
	if err := p.SetUpstreams([]string{b.Addr, a.Addr}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c5", "c6"} {
		if _, on := pinproxytest.Dial(t, addr, id); on != "A" {
			t.Fatalf("%s landed on %s, want A (fewest connections)", id, on)
		}
	}
}

// With DrainRemoved, a removed upstream's connections are left alone for
// that long, then moved one per rebalance round, each logged as drained.
func TestDrainRemoved(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.New(t, "B", pinproxytest.Line)
	log, logs := testLogger(t)
	var clock fakeClock
	cfg := pinproxy.Config{
		Upstreams: []string{a.Addr}, RebalanceInterval: -1, DrainRemoved: 10 * time.Minute,
		Logger: log, LogConnections: true,
	}
	pinproxy.SetClockForTest(&cfg, clock.now)
	p := newProxy(t, cfg)
	addr := serve(t, p)
	cls := make([]*pinproxytest.Client, 3)
	for i := range cls {
		cls[i], _ = pinproxytest.Dial(t, addr, string(rune('x'+i)))
	}
	if err := p.SetUpstreams([]string{b.Addr}); err != nil {
		t.Fatal(err)
	}
	if err := p.Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); len(s) != 2 || s[1].Live != 3 {
		t.Fatalf("a round before DrainRemoved passed moved something: %+v", s)
	}
	clock.advance(10 * time.Minute)
	for _, cl := range slices.Backward(cls) { // newest first
		if err := p.Rebalance(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !cl.Closed() {
			t.Fatalf("%s on the removed upstream was not moved", cl.ID)
		}
		if on := cl.Redial(); on != "B" {
			t.Fatalf("%s redialled onto %s, want B", cl.ID, on)
		}
	}
	testkit.WaitFor(t, "three drained lines", func() bool {
		return strings.Count(logs.String(), `reason=drained`) == 3
	})
	if got := p.Totals().Moves; got != 3 {
		t.Fatalf("%d moves, want 3", got)
	}
}

func TestParseUpstreams(t *testing.T) {
	ups, err := pinproxy.ParseUpstreams(strings.NewReader("# nodes\neu-01:9333  # first\n\n  usa-01:9333\n"))
	if err != nil || strings.Join(ups, ",") != "eu-01:9333,usa-01:9333" {
		t.Fatalf("ParseUpstreams = %q, %v", ups, err)
	}
	for _, tt := range []struct{ file, want string }{
		{"a:1\n\nb c:1\n", `line 3: "b c:1": host has a space in it`},
		{"a:1\n# x\na:1\n", `line 3: "a:1": listed twice (also line 1)`},
		{"a:1\nb\n", `line 2: "b": missing port in address, want host:port`},
		{"# nothing\n", "no upstreams"},
		// A byte-order mark from an editor, a control character: refused
		// with the line, not left to fail at every dial.
		{"\ufeffeu-01:9333\n", `line 1: "\ufeffeu-01:9333": host has a character no name has (U+FEFF)`},
		{"a:1\neu\x00-01:9333\n", `line 2: "eu\x00-01:9333": host has a character no name has (U+0000)`},
	} {
		_, err := pinproxy.ParseUpstreams(strings.NewReader(tt.file))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseUpstreams(%q) = %v, want %q", tt.file, err, tt.want)
		}
	}
}

// Two entries that resolve to one address are warned about at start.
func TestWarnsDuplicateResolution(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	_, port, _ := strings.Cut(a.Addr, ":")
	log, logs := testLogger(t)
	p := newProxy(t, pinproxy.Config{Upstreams: []string{a.Addr, "localhost:" + port}, RebalanceInterval: -1, Logger: log})
	serve(t, p)
	testkit.WaitFor(t, "a duplicate warning", func() bool {
		return strings.Contains(logs.String(), "two upstreams resolve to the same address")
	})
}
