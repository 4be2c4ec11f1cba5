package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
)

// A reload that leaves fewer than half the upstreams is warned about (a
// file caught half-written), one that leaves half or more is not.
func TestReloadShrinkWarned(t *testing.T) {
	for _, tc := range []struct {
		lines int
		warn  bool
	}{{1, true}, {2, false}, {3, false}} {
		var buf testkit.LogBuffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"}, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "upstreams")
		var b strings.Builder
		for i := range tc.lines {
			b.WriteString("127.0.0.1:" + string(rune('1'+i)) + "\n")
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		reload(p, path, log)
		if got := strings.Contains(buf.String(), "shrank by more than half"); got != tc.warn {
			t.Errorf("4 upstreams, then a file of %d: warned %v, want %v\n%s", tc.lines, got, tc.warn, buf.String())
		}
		if n := len(p.Stats()); n != tc.lines {
			t.Errorf("after the reload: %d upstreams, want %d (a warning, not a refusal)", n, tc.lines)
		}
	}
}

// An upstream whose name does not resolve is warned about with its line;
// IP addresses and names that resolve are not.
func TestWarnUnresolved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "upstreams")
	if err := os.WriteFile(path, []byte("# nodes\n127.0.0.1:1\nlocalhost:2\nno-such-node.invalid:3  # gone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A resolver that answers from /etc/hosts only: any DNS query fails.
	r := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS in this test")
	}}
	var buf testkit.LogBuffer
	warnUnresolved(path, []string{"127.0.0.1:1", "localhost:2", "no-such-node.invalid:3"}, r, slog.New(slog.NewTextHandler(&buf, nil)))
	got := buf.String()
	if strings.Count(got, "does not resolve") != 1 || !strings.Contains(got, "line=4 upstream=no-such-node.invalid:3") {
		t.Errorf("log %q: want one warning, for line 4's no-such-node.invalid:3", got)
	}
}
