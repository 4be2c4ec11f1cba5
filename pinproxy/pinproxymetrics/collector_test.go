package pinproxymetrics_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/goleak"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxymetrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixed is a Source with set figures.
type fixed struct {
	stats  []pinproxy.UpstreamStats
	totals pinproxy.Totals
}

func (f fixed) Stats() []pinproxy.UpstreamStats { return f.stats }
func (f fixed) Totals() pinproxy.Totals         { return f.totals }

func TestCollectorFigures(t *testing.T) {
	src := fixed{
		stats: []pinproxy.UpstreamStats{
			{Addr: "eu-01:9333", Live: 0, Dials: 4, Failures: 3, Answered: false,
				LastFailure: time.Unix(1_800_000_000, 500_000_000), LastError: "connection refused",
				State: "down", Refusing: "refusing sessions: 3 ended within 2ms", RefusedSessions: 4},
			{Addr: "usa-01:9333", Live: 2, Dials: 2, Answered: true, State: "up", Moved: 1, BytesSent: 10, BytesReceived: 20},
		},
		totals: pinproxy.Totals{Live: 2, Accepted: 3, Rejected: 0, Unrouted: 0, Moves: 1, FailedMoves: 1},
	}
	c := pinproxymetrics.NewCollector(src)
	want := `
# HELP pinproxy_upstream_live_connections Connections open to the upstream (dials in flight not counted).
# TYPE pinproxy_upstream_live_connections gauge
pinproxy_upstream_live_connections{upstream="eu-01:9333"} 0
pinproxy_upstream_live_connections{upstream="usa-01:9333"} 2
# HELP pinproxy_upstream_dial_failures_total Connection attempts to the upstream that failed.
# TYPE pinproxy_upstream_dial_failures_total counter
pinproxy_upstream_dial_failures_total{upstream="eu-01:9333"} 3
pinproxy_upstream_dial_failures_total{upstream="usa-01:9333"} 0
# HELP pinproxy_upstream_up 1 if the upstream is up (health checks when on, else the last dial or test-connect answered); 0 if down or not known yet.
# TYPE pinproxy_upstream_up gauge
pinproxy_upstream_up{upstream="eu-01:9333"} 0
pinproxy_upstream_up{upstream="usa-01:9333"} 1
# HELP pinproxy_upstream_last_failure_timestamp_seconds Unix time of the last failed attempt to the upstream; 0 if none.
# TYPE pinproxy_upstream_last_failure_timestamp_seconds gauge
pinproxy_upstream_last_failure_timestamp_seconds{upstream="eu-01:9333"} 1.8000000005e+09
pinproxy_upstream_last_failure_timestamp_seconds{upstream="usa-01:9333"} 0
# HELP pinproxy_upstream_moved_connections_total Connections to the upstream that a rebalance round closed to move them away.
# TYPE pinproxy_upstream_moved_connections_total counter
pinproxy_upstream_moved_connections_total{upstream="eu-01:9333"} 0
pinproxy_upstream_moved_connections_total{upstream="usa-01:9333"} 1
# HELP pinproxy_upstream_bytes_total Bytes copied through the upstream, counted as they are copied: direction "sent" from clients to it, "received" from it to clients (bytes_sent and bytes_received on /status).
# TYPE pinproxy_upstream_bytes_total counter
pinproxy_upstream_bytes_total{direction="received",upstream="eu-01:9333"} 0
pinproxy_upstream_bytes_total{direction="received",upstream="usa-01:9333"} 20
pinproxy_upstream_bytes_total{direction="sent",upstream="eu-01:9333"} 0
pinproxy_upstream_bytes_total{direction="sent",upstream="usa-01:9333"} 10
# HELP pinproxy_upstream_refusing_sessions 1 while the upstream accepts connections but refuses the sessions (it ended the last few within the refused-session time of their dial; /status says why); else 0.
# TYPE pinproxy_upstream_refusing_sessions gauge
pinproxy_upstream_refusing_sessions{upstream="eu-01:9333"} 1
pinproxy_upstream_refusing_sessions{upstream="usa-01:9333"} 0
# HELP pinproxy_upstream_refused_sessions_total Sessions the upstream refused: it ended them within the refused-session time of the dial, having sent little or nothing.
# TYPE pinproxy_upstream_refused_sessions_total counter
pinproxy_upstream_refused_sessions_total{upstream="eu-01:9333"} 4
pinproxy_upstream_refused_sessions_total{upstream="usa-01:9333"} 0
# HELP pinproxy_rebalance_failed_moves_total Moves whose client's redial the idle upstream refused; no move goes to it again until one of its sessions holds.
# TYPE pinproxy_rebalance_failed_moves_total counter
pinproxy_rebalance_failed_moves_total 1
# HELP pinproxy_rebalance_moves_total Connections closed by rebalance rounds to move them to an idle upstream.
# TYPE pinproxy_rebalance_moves_total counter
pinproxy_rebalance_moves_total 1
# HELP pinproxy_client_connections Client connections being handled.
# TYPE pinproxy_client_connections gauge
pinproxy_client_connections 2
`
	got := scrape(t, c)
	for _, line := range strings.Split(strings.TrimSpace(want), "\n") {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	// Per upstream: eight series, and bytes_total in two directions;
	// then six totals and the upgrades' two results.
	if n := strings.Count(got, "\npinproxy_"); n != 10*2+6+2 {
		t.Errorf("%d samples, want %d:\n%s", n, 10*2+6+2, got)
	}
}

// scrape registers c on a registry of its own and returns the text format.
func scrape(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// Against a real proxy: a refused upstream shows as down with a failure.
func TestCollectorReadsProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{down}, RebalanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(front) }()
	defer func() {
		p.Shutdown(context.Background())
		<-done
	}()
	c, err := net.Dial("tcp", front.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	c.Read(make([]byte, 1)) // closed: nothing answers
	c.Close()

	col := pinproxymetrics.NewCollector(p)
	want := `
# HELP pinproxy_upstream_up 1 if the upstream is up (health checks when on, else the last dial or test-connect answered); 0 if down or not known yet.
# TYPE pinproxy_upstream_up gauge
pinproxy_upstream_up{upstream="` + down + `"} 0
# HELP pinproxy_client_connections_unrouted_total Client connections closed because no upstream answered.
# TYPE pinproxy_client_connections_unrouted_total counter
pinproxy_client_connections_unrouted_total 1
`
	got := scrape(t, col)
	for _, line := range strings.Split(strings.TrimSpace(want), "\n") {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("scrape lacks %q:\n%s", line, got)
		}
	}
}
