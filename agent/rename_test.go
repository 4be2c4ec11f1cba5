package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// namePlatform accepts the readings of the nodes its token allows (any,
// for the platform admin's token) and answers 403 for the others, as the
// reference platform does for a node's token.
type namePlatform struct {
	mu    sync.Mutex
	allow map[string]bool // nil: the admin's token, any node
	down  bool
	got   []overload.Reading
}

func (p *namePlatform) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var rd overload.Reading
	_ = json.Unmarshal(b, &rd)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.down:
		w.WriteHeader(http.StatusServiceUnavailable)
	case p.allow != nil && !p.allow[rd.Node]:
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `{"error": "a reading of another node with the token of node new", "reason": "unauthorized"}`)
	default:
		p.got = append(p.got, rd)
	}
}

func (p *namePlatform) nodes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, r := range p.got {
		out = append(out, r.Node)
	}
	return out
}

// TestRenamedNodeQueue: reports queued under the node's old name do not
// hold the new name's readings back: they go under the old name where the
// token allows it, and are otherwise dropped at once, logged and counted.
func TestRenamedNodeQueue(t *testing.T) {
	for _, tt := range []struct {
		name  string
		allow map[string]bool
		want  string // the nodes the platform counts, in order
	}{
		{"node token", map[string]bool{"new": true}, "new"},
		{"operator token", nil, "old,old,old,new"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &namePlatform{down: true}
			srv := httptest.NewServer(p)
			defer srv.Close()
			dir := t.TempDir()
			cfg := Config{Node: "old", Source: newFakeSource(), StateDir: dir, ReportURL: srv.URL, Token: "t",
				Interval: time.Hour, RetryMax: time.Hour}
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if _, err := a.Step(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			a.Close()

			p.mu.Lock()
			p.down, p.allow = false, tt.allow
			p.mu.Unlock()
			logs := &testkit.LogBuffer{}
			cfg.Node, cfg.Logger = "new", slog.New(slog.NewTextHandler(logs, nil))
			b, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if !strings.Contains(logs.String(), "reports queued under another node name") {
				t.Errorf("no start-up warning of the reports queued under the old name:\n%s", logs)
			}
			reportOne(t, b) // a reporter whose back-off is an hour: only a drop at once lets "new" through
			testkit.WaitFor(t, "the new node's reading counted", func() bool {
				n := p.nodes()
				return len(n) > 0 && n[len(n)-1] == "new"
			})
			if got := strings.Join(p.nodes(), ","); got != tt.want {
				t.Errorf("the platform counted the readings of %s, want %s", got, tt.want)
			}
			dropped := counterValue(t, b.m.reportsDropped.WithLabelValues("renamed"))
			wantDropped := float64(3 - strings.Count(tt.want, "old"))
			if dropped != wantDropped {
				t.Errorf("reports_dropped_total{reason=renamed} = %v, want %v", dropped, wantDropped)
			}
			if n := strings.Count(logs.String(), "queued under the node's old name; dropped it"); n != int(wantDropped) {
				t.Errorf("%d warnings of a dropped renamed report, want %v:\n%s", n, wantDropped, logs)
			}
		})
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
