package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/filestore"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/notify"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// TestNotifyFileRefused: a bad -notify-file is refused at start, naming
// the line; a bad one on reload keeps the one in force.
func TestNotifyFileRefused(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	apitest.WriteFile(t, tokens, "op-token\n")
	bad := apitest.NotifyFile(t, "# receivers", "x1 https://a/ whsec_c2hvcnQ=")
	var stderr strings.Builder
	code := run(t.Context(), []string{"-token-file", tokens, "-state-dir", dir, "-notify-file", bad, "-listen", "127.0.0.1:0"}, &stderr, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), bad+":2: node x1: secret 1") {
		t.Fatalf("exit %d, %q; want 2 and the line named", code, stderr.String())
	}
	c := &platformtest.Clock{T: platformtest.T0}
	file := apitest.NotifyFile(t, "* http://127.0.0.1:9/ "+platformtest.HookSecret)
	cfg := apitest.NotifyConfig(file)
	n := notify.New(cfg, apitest.NewDispatch(t, cfg), nil, platformtest.Logger(t), c.Now)
	apitest.WriteFile(t, file, "* http://127.0.0.1:9/\n")
	if err := n.Reload(); err == nil || !strings.Contains(err.Error(), file+":1:") || !strings.Contains(err.Error(), "previous file stays") {
		t.Fatalf("reload of a bad file: %v", err)
	}
	if n.Receivers().ForNode("any") == nil {
		t.Fatal("the file in force was dropped by a bad reload")
	}
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if code := run(t.Context(), []string{"-h"}, &out, &out); code != 0 || !strings.Contains(out.String(), "-cool-down") {
		t.Fatalf("-h: exit %d, output %q", code, out.String())
	}
	for _, args := range [][]string{{}, {"-token-file", "/nonexistent"}, {"-token-file", "x", "-plan-every", "0s"}, {"extra"}, {"-token-file", "x", "-max-conns", "-1"}} {
		out.Reset()
		if code := run(t.Context(), args, &out, &out); code != 2 {
			t.Errorf("%q: exit %d, want 2; %s", args, code, out.String())
		}
	}
	o, err := parseFlags([]string{"-token-file", "t", "-cool-down", "0s"}, io.Discard)
	if err != nil || o.cfg.Policy.CoolDown >= 0 {
		t.Fatalf("-cool-down 0: %v %v, want no cool-down", o.cfg.Policy.CoolDown, err)
	}
}

// TestSampleRoutes: the route table shipped beside the example loads.
func TestSampleRoutes(t *testing.T) {
	s, err := store.ReadSeed("routes.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := filestore.Open(store.Config{StateDir: t.TempDir()}, s)
	if err != nil {
		t.Fatal(err)
	}
	if vs, _, _ := fleet.New(p, nil).Views(t.Context(), "", 0); len(vs) != 3 {
		got := len(vs)
		t.Fatalf("%d nodes, want 3", got)
	}
	if _, err := store.ReadSeed("testdata/nonexistent.json"); err == nil {
		t.Fatal("a missing route table read without error")
	}
}

// TestDBFlagErrors: a -db or -db-batch the platform cannot use stops it
// with exit 2 and a message naming the flag, the URL without its
// password, and what is wrong.
func TestDBFlagErrors(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nothing listens there once closed
	ln.Close()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-db-batch", "-3"}, []string{"-db-batch -3: want 1 or more"}},
		{[]string{"-db", "mysql://u:pw@h/db"}, []string{"-db mysql://u:xxxxx@h/db: want a postgres:// or postgresql:// URL"}},
		{[]string{"-db", "postgres://u:pw@[bad"}, []string{"-db postgres://(a URL that does not parse, not shown): cannot parse: failed to parse as URL"}},
		{[]string{"-db", "host=h password='p w' port=x"}, []string{"-db host=h password=xxxxx port=x: cannot parse: invalid port"}},
		{[]string{"-db", "postgres://u:pw@" + closed + "/db?sslmode=disable"}, []string{"platform: -db postgres://u:xxxxx@" + closed + "/db?sslmode=disable: ", "connection refused"}},
	} {
		var out bytes.Buffer
		// Bounded: a platform that took the flags would serve until then.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		code := run(ctx, append([]string{"-token-file", tokenFile, "-listen", "127.0.0.1:0", "-state-dir", filepath.Join(dir, "state")}, tc.args...), &out, &out)
		cancel()
		if code != 2 {
			t.Errorf("%q: exit %d, want 2: %s", tc.args, code, out.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%q: output %q lacks %q", tc.args, out.String(), w)
			}
		}
		if strings.Contains(out.String(), ":pw@") || strings.Contains(out.String(), "p w") {
			t.Errorf("%q: output shows the password: %s", tc.args, out.String())
		}
	}
}
