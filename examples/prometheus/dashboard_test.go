package prometheus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/proofkit/nodekit/agent"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxymetrics"
)

const dashboardFile = "grafana-nodekit.json"

// dashboardQueries returns every PromQL expression of the dashboard: the
// panels' targets and the variables' label_values() selectors, with
// Grafana's variables replaced by what Prometheus would see.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	grafana := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*", "$proxy", ".*")
	var out []string
	type panel struct {
		Title   string                  `json:"title"`
		Targets []struct{ Expr string } `json:"targets"`
		Panels  []json.RawMessage       `json:"panels"`
	}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("%s: panel: %v", dashboardFile, err)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %q has a target with no expr", dashboardFile, p.Title)
					continue
				}
				out = append(out, grafana.Replace(tg.Expr))
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	lv := regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`)
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			m := lv.FindStringSubmatch(q)
			if m == nil {
				t.Errorf("%s: variable query %q is not label_values(selector, label)", dashboardFile, q)
				continue
			}
			out = append(out, m[1])
		}
	}
	return out
}

// metricNames returns the metric names an expression reads: identifiers
// that are not functions, keywords, label names or literals.
func metricNames(expr string) []string {
	for _, re := range []string{`"(?:[^"\\]|\\.)*"`, `\{[^}]*\}`, `\[[^\]]*\]`,
		`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`, `\b\d[0-9a-zA-Z_.]*`} {
		expr = regexp.MustCompile(re).ReplaceAllString(expr, " ")
	}
	keywords := map[string]bool{"bool": true, "and": true, "or": true, "unless": true, "offset": true, "by": true, "without": true}
	var names []string
	for _, m := range regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\(?)`).FindAllStringSubmatch(expr, -1) {
		if m[2] == "(" || keywords[m[1]] {
			continue
		}
		names = append(names, m[1])
	}
	return names
}

// linkSource is a node with one link, so every agent series exists.
type linkSource struct{ at time.Time }

func (s *linkSource) Read(context.Context) (overload.Reading, error) {
	s.at = s.at.Add(30 * time.Second)
	return overload.Reading{At: s.at, MemoryUsedPercent: 50, Load15: 1, CPUs: 2, ConntrackMax: 1000,
		Links: []overload.Link{{Name: "eth0", RxBitsPerSecond: 1e6, TxBitsPerSecond: 1e6, SpeedMbps: 1000}}}, nil
}

// knownNames are the series a Prometheus scraping the agent and the proxy
// and evaluating the rules holds: the agent's /metrics as it serves it,
// the pinproxymetrics collector's descriptions (the per-upstream series a
// proxy serves once it has upstreams), the pinproxy binary's /metrics as
// it serves it (pinproxy_build_info is the binary's, not the
// collector's), and the rules' records.
func knownNames(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	a, err := agent.New(agent.Config{Node: "n", Source: &linkSource{at: time.Unix(1_800_000_000, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for range 2 {
		if _, err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for name := range fams {
		known[name] = true
	}
	descs := make(chan *prometheus.Desc, 100)
	pinproxymetrics.NewCollector(&pinproxy.Proxy{}).Describe(descs)
	close(descs)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			known[m[1]] = true
		}
	}
	for _, name := range proxyMetrics(t) {
		known[name] = true
	}
	rules, _ := parseRules(t, rulesFile)
	for _, r := range rules {
		if r.kind == "record" {
			known[r.name] = true
		}
	}
	return known
}

// proxyMetrics builds cmd/pinproxy, runs it on loopback with an upstream
// nobody listens on, and returns the metric names its admin port's
// /metrics serves.
func proxyMetrics(t *testing.T) []string {
	t.Helper()
	b := &testkit.Build{Pkgs: []string{"../../cmd/pinproxy"}}
	t.Cleanup(b.Clean)
	admin := testkit.FreeAddr(t)
	p := testkit.StartProc(t, exec.Command(b.Bin(t, "pinproxy"), "-listen", "127.0.0.1:0", "-upstreams", testkit.FreeAddr(t), "-admin", admin), nil)
	log := &p.Log
	var names []string
	testkit.WaitFor(t, "pinproxy's /metrics", func() bool {
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatalf("pinproxy's /metrics: %v\n%s", err, log.String())
		}
		for name := range fams {
			names = append(names, name)
		}
		return true
	})
	if !slices.Contains(names, "pinproxy_build_info") {
		t.Fatalf("pinproxy's /metrics lacks pinproxy_build_info: %q", names)
	}
	return names
}

// TestDashboardQueries: every query of the Grafana dashboard parses (by
// promtool, as a recording rule) and reads only series that the agent,
// the proxy or the rules produce.
func TestDashboardQueries(t *testing.T) {
	queries := dashboardQueries(t)
	if len(queries) < 20 {
		t.Fatalf("%s: %d queries; the dashboard lost its panels?", dashboardFile, len(queries))
	}
	known := knownNames(t)
	sawAgent, sawProxy := false, false
	for _, q := range queries {
		names := metricNames(q)
		if len(names) == 0 && strings.Trim(q, "0123456789. ") != "" {
			t.Errorf("query %q reads no series", q)
		}
		for _, n := range names {
			if !known[n] {
				t.Errorf("query %q reads %s, which neither the agent, the proxy nor the rules produce", q, n)
			}
			sawAgent = sawAgent || strings.HasPrefix(n, "proofkit_agent_")
			sawProxy = sawProxy || strings.HasPrefix(n, "pinproxy_")
		}
		if strings.Contains(q, "proofkit_agent_") && !strings.Contains(q, `job="proofkit-agent"`) {
			t.Errorf("query %q does not select the agent's job", q)
		}
	}
	for _, want := range []string{"proofkit_agent_build_info", "pinproxy_build_info"} {
		if !slices.ContainsFunc(queries, func(q string) bool { return slices.Contains(metricNames(q), want) }) {
			t.Errorf("%s: no panel shows %s, the version each instance runs", dashboardFile, want)
		}
	}
	if !sawAgent || !sawProxy {
		t.Errorf("the dashboard shows agent metrics %v, proxy metrics %v; want both", sawAgent, sawProxy)
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus): the names were checked, not the syntax")
	}
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range queries {
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %q\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
	if !slices.ContainsFunc(strings.Split(string(out), "\n"), func(l string) bool { return strings.Contains(l, "SUCCESS") }) {
		t.Errorf("promtool: %s", out)
	}
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (instance, reason) (rate(a_total{job="x",r=~"y"}[1m]))`: {"a_total"},
		`100 * b{x="}"} / c > bool 80`:                                  {"b", "c"},
		`instance:nodekit_overloaded:bool == 1 unless d offset 30s`:     {"instance:nodekit_overloaded:bool", "d"},
		`90`: nil,
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}
