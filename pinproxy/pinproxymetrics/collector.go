// Package pinproxymetrics exports a pinproxy.Proxy's state to Prometheus.
// It is kept apart from pinproxy so that programs embedding the proxy
// without Prometheus do not link the Prometheus client.
//
// Register a Collector on a registry of your own:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(pinproxymetrics.NewCollector(p))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
package pinproxymetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proofkit/nodekit/pinproxy"
)

// Source is what a Collector reads at each scrape; *pinproxy.Proxy is one.
type Source interface {
	Stats() []pinproxy.UpstreamStats
	Totals() pinproxy.Totals
}

var _ Source = (*pinproxy.Proxy)(nil)

// Collector is a prometheus.Collector that reads a proxy's Stats and
// Totals at each scrape. Metrics per upstream carry the label
// upstream="host:port".
type Collector struct {
	src Source

	live, dials, failures, up, lastFailure, moved, bytes       *prometheus.Desc
	refusing, refused                                          *prometheus.Desc
	clientsLive, accepted, rejected, unrouted, moves, upgrades *prometheus.Desc
	failedMoves                                                *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector for src, usually a *pinproxy.Proxy.
func NewCollector(src Source) *Collector {
	up := []string{"upstream"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("pinproxy_"+name, help, labels, nil)
	}
	return &Collector{
		src:         src,
		live:        d("upstream_live_connections", "Connections open to the upstream (dials in flight not counted).", up),
		dials:       d("upstream_dials_total", "Connection attempts to the upstream, including rebalance test-connects.", up),
		failures:    d("upstream_dial_failures_total", "Connection attempts to the upstream that failed.", up),
		up:          d("upstream_up", "1 if the upstream is up (health checks when on, else the last dial or test-connect answered); 0 if down or not known yet.", up),
		lastFailure: d("upstream_last_failure_timestamp_seconds", "Unix time of the last failed attempt to the upstream; 0 if none.", up),
		moved:       d("upstream_moved_connections_total", "Connections to the upstream that a rebalance round closed to move them away.", up),
		bytes: d("upstream_bytes_total", "Bytes copied through the upstream, counted as they are copied: direction \"sent\" from clients to it, \"received\" from it to clients (bytes_sent and bytes_received on /status).",
			[]string{"upstream", "direction"}),
		refusing:    d("upstream_refusing_sessions", "1 while the upstream accepts connections but refuses the sessions (it ended the last few within the refused-session time of their dial; /status says why); else 0.", up),
		refused:     d("upstream_refused_sessions_total", "Sessions the upstream refused: it ended them within the refused-session time of the dial, having sent little or nothing.", up),
		clientsLive: d("client_connections", "Client connections being handled.", nil),
		accepted:    d("client_connections_accepted_total", "Client connections accepted.", nil),
		rejected:    d("client_connections_rejected_total", "Client connections closed at once because the connection limit was reached.", nil),
		unrouted:    d("client_connections_unrouted_total", "Client connections closed because no upstream answered.", nil),
		moves:       d("rebalance_moves_total", "Connections closed by rebalance rounds to move them to an idle upstream.", nil),
		failedMoves: d("rebalance_failed_moves_total", "Moves whose client's redial the idle upstream refused; no move goes to it again until one of its sessions holds.", nil),
		upgrades: d("upgrades_total", "Upgrades of the binary, by this process and the ones before it: result \"ok\" when the new process took every connection, \"failed\" when the old one kept them and served on.",
			[]string{"result"}),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.live, c.dials, c.failures, c.up, c.lastFailure, c.moved, c.bytes,
		c.refusing, c.refused,
		c.clientsLive, c.accepted, c.rejected, c.unrouted, c.moves, c.upgrades,
		c.failedMoves,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.src.Stats() {
		m := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
			ch <- prometheus.MustNewConstMetric(d, t, v, s.Addr)
		}
		m(c.live, prometheus.GaugeValue, float64(s.Live))
		m(c.dials, prometheus.CounterValue, float64(s.Dials))
		m(c.failures, prometheus.CounterValue, float64(s.Failures))
		upV := 0.0
		if s.State == "up" {
			upV = 1
		}
		m(c.up, prometheus.GaugeValue, upV)
		last := 0.0
		if !s.LastFailure.IsZero() {
			last = float64(s.LastFailure.UnixNano()) / 1e9
		}
		m(c.lastFailure, prometheus.GaugeValue, last)
		m(c.moved, prometheus.CounterValue, float64(s.Moved))
		refusing := 0.0
		if s.Refusing != "" {
			refusing = 1
		}
		m(c.refusing, prometheus.GaugeValue, refusing)
		m(c.refused, prometheus.CounterValue, float64(s.RefusedSessions))
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(s.BytesSent), s.Addr, "sent")
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(s.BytesReceived), s.Addr, "received")
	}
	t := c.src.Totals()
	ch <- prometheus.MustNewConstMetric(c.clientsLive, prometheus.GaugeValue, float64(t.Live))
	ch <- prometheus.MustNewConstMetric(c.accepted, prometheus.CounterValue, float64(t.Accepted))
	ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(t.Rejected))
	ch <- prometheus.MustNewConstMetric(c.unrouted, prometheus.CounterValue, float64(t.Unrouted))
	ch <- prometheus.MustNewConstMetric(c.moves, prometheus.CounterValue, float64(t.Moves))
	ch <- prometheus.MustNewConstMetric(c.failedMoves, prometheus.CounterValue, float64(t.FailedMoves))
	ch <- prometheus.MustNewConstMetric(c.upgrades, prometheus.CounterValue, float64(t.Upgrades), "ok")
	ch <- prometheus.MustNewConstMetric(c.upgrades, prometheus.CounterValue, float64(t.UpgradesFailed), "failed")
}
