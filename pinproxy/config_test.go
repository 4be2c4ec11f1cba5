package pinproxy_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/pinproxy"
)

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  pinproxy.Config
		want string // in the error
	}{
		{"no upstreams", pinproxy.Config{}, "no upstreams"},
		{"missing port", pinproxy.Config{Upstreams: []string{"a:1", "eu-01"}}, `upstream 2 "eu-01": missing port`},
		{"empty", pinproxy.Config{Upstreams: []string{""}}, `upstream 1 "": missing port`},
		{"missing host", pinproxy.Config{Upstreams: []string{":9333"}}, `upstream 1 ":9333": missing host`},
		{"port zero", pinproxy.Config{Upstreams: []string{"a:0"}}, `upstream 1 "a:0": port "0"`},
		{"port too big", pinproxy.Config{Upstreams: []string{"a:65536"}}, `port "65536"`},
		{"named port", pinproxy.Config{Upstreams: []string{"a:http"}}, `port "http"`},
		{"space", pinproxy.Config{Upstreams: []string{" a:1"}}, "space"},
		{"too many colons", pinproxy.Config{Upstreams: []string{"::1:80"}}, "too many colons"},
		{"twice", pinproxy.Config{Upstreams: []string{"a:1", "b:2", "a:1"}}, `upstream 3 "a:1": listed twice (also upstream 1)`},
		{"negative dial timeout", pinproxy.Config{Upstreams: []string{"a:1"}, DialTimeout: -1}, "Config.DialTimeout -1ns"},
		{"negative max conns", pinproxy.Config{Upstreams: []string{"a:1"}, MaxConns: -1}, "Config.MaxConns -1: must not be negative"},
		{"send without expect", pinproxy.Config{Upstreams: []string{"a:1"}, CheckSend: []byte("hi")}, "Config.CheckSend (2 bytes): needs CheckExpect"},
		{"negative check timeout", pinproxy.Config{Upstreams: []string{"a:1"}, CheckTimeout: -1}, "Config.CheckTimeout -1ns"},
		{"negative refused bytes", pinproxy.Config{Upstreams: []string{"a:1"}, RefusedBytes: -1}, "Config.RefusedBytes -1"},
		{"negative refused sessions", pinproxy.Config{Upstreams: []string{"a:1"}, RefusedSessions: -1}, "Config.RefusedSessions -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := pinproxy.New(tt.cfg)
			if err == nil {
				t.Fatalf("New(%+v) = %v, nil; want an error", tt.cfg, p)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "pinproxy: ") {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestNewAcceptsGoodUpstreams(t *testing.T) {
	for _, addr := range []string{"eu-01:9333", "127.0.0.1:1", "[::1]:65535", "litecoin-fulcrum-eu-dev-01.example:9333"} {
		p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{addr}})
		if err != nil {
			t.Errorf("New with upstream %q: %v", addr, err)
			continue
		}
		if s := p.Stats(); len(s) != 1 || s[0].Addr != addr || s[0].Answered || s[0].State != "unknown" || s[0].Live != 0 {
			t.Errorf("Stats of a new proxy with %q = %+v", addr, s)
		}
	}
}

// New never panics, and what it accepts SplitHostPort accepts.
func FuzzNew(f *testing.F) {
	for _, s := range []string{"a:1", "", ":", "[::1]:80", "a:0", "a:b:c", "[a]:1", " a:1", "a:65536", "a:-1", "a:+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{addr}})
		if err != nil {
			if p != nil {
				t.Fatal("non-nil proxy with an error")
			}
			return
		}
		if got := p.Stats()[0].Addr; got != addr {
			t.Fatalf("upstream %q became %q", addr, got)
		}
		if host, _, err := net.SplitHostPort(addr); err != nil || host == "" {
			t.Fatalf("accepted %q, which is not host:port (%v)", addr, err)
		}
	})
}

// ParseUpstreams never panics; what it accepts New accepts, with no
// comment or space left in an entry; what it refuses names a line.
func FuzzParseUpstreams(f *testing.F) {
	for _, s := range []string{"a:1\n", "# x\na:1 # y\n\nb:2", "a:1\na:1\n", "a b:1\n", "\n\n", "a:1\r\nb:2\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, file string) {
		ups, err := pinproxy.ParseUpstreams(strings.NewReader(file))
		if err != nil {
			var ue *pinproxy.UpstreamError
			if errors.As(err, &ue) && ue.Line < 1 {
				t.Fatalf("error %v names no line", err)
			}
			return
		}
		for _, u := range ups {
			if strings.ContainsAny(u, "# \t\r\n") {
				t.Fatalf("entry %q from %q", u, file)
			}
		}
		if _, err := pinproxy.New(pinproxy.Config{Upstreams: ups}); err != nil {
			t.Fatalf("New refused what ParseUpstreams accepted: %v", err)
		}
	})
}

// A refused field is a *ConfigError naming it, for a command to map to
// its flag.
func TestNewConfigErrorNamesField(t *testing.T) {
	for field, cfg := range map[string]pinproxy.Config{
		"DialTimeout":       {DialTimeout: -1},
		"MaxConns":          {MaxConns: -1},
		"RebalanceMaxMoves": {RebalanceMaxMoves: -1},
		"CheckRise":         {CheckRise: -1},
		"CheckFall":         {CheckFall: -1},
		"SendProxy":         {SendProxy: 3},
	} {
		cfg.Upstreams = []string{"a:1"}
		_, err := pinproxy.New(cfg)
		var ce *pinproxy.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("New with a bad %s: %v, want a *ConfigError for it", field, err)
		}
	}
}
