package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/proofkit/nodekit/internal/buildinfo"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/overload/probe"
)

// metrics are the agent's Prometheus metrics, all under proofkit_agent_,
// so that a host scraped by node_exporter and by the agent has no series
// twice. The names follow node_exporter's conventions: base units
// (bytes, seconds, ratios), _total for counters, _timestamp_seconds for
// instants, and byte counters where node_exporter has one (rules take
// rate() of them). Where node_exporter exports the same value, the name
// is node_exporter's with proofkit_agent_ for node_ (proofkit_agent_load15
// beside node_load15).
type metrics struct {
	overloaded       prometheus.Gauge
	overloadedSince  prometheus.Gauge
	checkPassed      *prometheus.GaugeVec
	checkHolding     *prometheus.GaugeVec
	inputMissing     *prometheus.GaugeVec
	readings         prometheus.Counter
	readingErrors    prometheus.Counter
	lastReading      prometheus.Gauge
	memoryUsed       prometheus.Gauge
	load15           prometheus.Gauge
	cpus             prometheus.Gauge
	conntrackEntries prometheus.Gauge
	conntrackLimit   prometheus.Gauge
	conntrackDrops   prometheus.Counter
	listenDrops      prometheus.Counter
	linkRx           *prometheus.CounterVec
	linkTx           *prometheus.CounterVec
	linkSpeed        *prometheus.GaugeVec
	notices          prometheus.Counter
	reportsQueued    prometheus.Gauge
	reportsSent      prometheus.Counter
	reportsDropped   *prometheus.CounterVec
	reportFailures   prometheus.Counter
	buildInfo        *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	gv := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &metrics{
		overloaded:       g("proofkit_agent_overloaded", "1 while the node is overloaded (a check passed in 3 of its last 5 readings), else 0."),
		overloadedSince:  g("proofkit_agent_overload_start_timestamp_seconds", "Unix time the current overload started; 0 when not overloaded."),
		checkPassed:      gv("proofkit_agent_check_passed", "1 if the check's threshold was passed in the latest reading, else 0.", "check"),
		checkHolding:     gv("proofkit_agent_check_holding", "1 if the check passed in enough of its window (3 of the last 5 readings by default) to hold, else 0.", "check"),
		inputMissing:     gv("proofkit_agent_input_missing", "1 if the input could not be measured in the latest reading, else 0.", "input"),
		readings:         c("proofkit_agent_readings_total", "Readings taken and evaluated."),
		readingErrors:    c("proofkit_agent_reading_errors_total", "Readings that failed (probe error or rejected by the tracker)."),
		lastReading:      g("proofkit_agent_last_reading_timestamp_seconds", "Unix time of the latest reading."),
		memoryUsed:       g("proofkit_agent_memory_used_ratio", "Memory used, (MemTotal - MemAvailable) / MemTotal, 0 to 1."),
		load15:           g("proofkit_agent_load15", "15m load average (as node_load15)."),
		cpus:             g("proofkit_agent_cpus", "CPUs the node's processes may run on."),
		conntrackEntries: g("proofkit_agent_nf_conntrack_entries", "Number of currently allocated flow entries for connection tracking, in the agent's network namespace (as node_nf_conntrack_entries)."),
		conntrackLimit:   g("proofkit_agent_nf_conntrack_entries_limit", "Maximum size of connection tracking table (as node_nf_conntrack_entries_limit)."),
		conntrackDrops:   c("proofkit_agent_conntrack_drops_total", "Connections dropped because the conntrack table was full, summed over readings since the agent started."),
		listenDrops:      c("proofkit_agent_listen_drops_total", "Connections dropped by full listen queues, summed over readings since the agent started."),
		linkRx:           cv("proofkit_agent_network_receive_bytes_total", "Bytes received on the link since the agent started, as the kernel counts them (the growth of the link's own counter between readings; loopback and links that are down are left out).", "device"),
		linkTx:           cv("proofkit_agent_network_transmit_bytes_total", "Bytes transmitted on the link, summed as proofkit_agent_network_receive_bytes_total.", "device"),
		linkSpeed:        gv("proofkit_agent_network_speed_bytes", "Link speed in bytes per second, known links only (as node_network_speed_bytes).", "device"),
		notices:          c("proofkit_agent_notices_total", "Overload notices produced (at most one an hour for a node)."),
		reportsQueued:    g("proofkit_agent_reports_queued", "Reports waiting to be accepted by the platform."),
		reportsSent:      c("proofkit_agent_reports_sent_total", "Reports the platform accepted."),
		reportsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proofkit_agent_reports_dropped_total",
			Help: "Reports dropped: reason=overflow (queue full, oldest dropped; never one the platform may have counted), rejected (the platform refused the report), torn (a line cut by a crash), renamed (queued under the node's old name, which the token may not report for).",
		}, []string{"reason"}),
		reportFailures: c("proofkit_agent_report_failures_total", "Report attempts that failed and will be retried."),
		buildInfo:      gv("proofkit_agent_build_info", "Always 1; the labels say the version, commit and Go version of the running agent (as pinproxy_build_info).", "version", "commit", "goversion"),
	}
	cs := []prometheus.Collector{
		m.overloaded, m.overloadedSince, m.checkPassed, m.checkHolding, m.inputMissing, m.readings,
		m.readingErrors, m.lastReading, m.memoryUsed, m.load15, m.cpus,
		m.conntrackEntries, m.conntrackLimit, m.conntrackDrops, m.listenDrops,
		m.linkRx, m.linkTx, m.linkSpeed, m.notices, m.reportsQueued, m.reportsSent,
		m.reportsDropped, m.reportFailures, m.buildInfo,
	}
	for _, col := range cs {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	for _, reason := range []string{"overflow", "rejected", "torn", "renamed"} {
		m.reportsDropped.WithLabelValues(reason)
	}
	bi := buildinfo.Read()
	m.buildInfo.WithLabelValues(bi.Version, bi.Commit, bi.GoVersion).Set(1)
	return m, nil
}

// registerProcess adds the process and Go runtime collectors (RSS, CPU,
// goroutines) so the agent's own footprint is visible.
func registerProcess(reg prometheus.Registerer) error {
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return err
	}
	return reg.Register(collectors.NewGoCollector())
}

// observeReading sets the gauges that mirror a reading.
//
// moved and sinceLast are for the byte counters (see addLinkBytes).
func (m *metrics) observeReading(r overload.Reading, moved []probe.LinkBytes, sinceLast time.Duration) {
	m.readings.Inc()
	m.lastReading.Set(float64(r.At.UnixNano()) / 1e9)
	missing := make(map[overload.Input]bool, len(r.Missing))
	for _, in := range r.Missing {
		missing[in] = true
	}
	for _, in := range []overload.Input{
		overload.InputMemory, overload.InputLoad, overload.InputConntrack,
		overload.InputConntrackDrops, overload.InputListenDrops, overload.InputBandwidth,
	} {
		m.inputMissing.WithLabelValues(string(in)).Set(b2f(missing[in]))
	}
	if !missing[overload.InputMemory] {
		m.memoryUsed.Set(r.MemoryUsedPercent / 100)
	}
	if !missing[overload.InputLoad] {
		m.load15.Set(r.Load15)
		m.cpus.Set(float64(r.CPUs))
	}
	if !missing[overload.InputConntrack] {
		m.conntrackEntries.Set(float64(r.ConntrackEntries))
		m.conntrackLimit.Set(float64(r.ConntrackMax))
	}
	m.conntrackDrops.Add(float64(r.ConntrackDrops))
	m.listenDrops.Add(float64(r.ListenDrops))
	m.linkSpeed.Reset()
	for _, l := range r.Links {
		if l.SpeedMbps > 0 {
			m.linkSpeed.WithLabelValues(probe.LinkName(l.Name)).Set(float64(l.SpeedMbps) * 1e6 / 8)
		}
	}
	addLinkBytes(m.linkRx, m.linkTx, r.Links, moved, sinceLast)
}

// addLinkBytes adds to the byte counters what each link moved: the
// kernel's own counts when the source gave them (moved is not nil), else
// each link's rate times sinceLast, the monotonic time since the previous
// reading (nothing for the first). Never the wall clock: a counter that
// followed it would jump with a clock step, and Prometheus's rate() of it
// would show that step as traffic.
func addLinkBytes(rx, tx *prometheus.CounterVec, links []overload.Link, moved []probe.LinkBytes, sinceLast time.Duration) {
	if moved != nil {
		for _, b := range moved {
			rx.WithLabelValues(probe.LinkName(b.Name)).Add(float64(b.RxBytes))
			tx.WithLabelValues(probe.LinkName(b.Name)).Add(float64(b.TxBytes))
		}
		return
	}
	dt := sinceLast.Seconds()
	for _, l := range links {
		rx.WithLabelValues(probe.LinkName(l.Name)).Add(max(l.RxBitsPerSecond, 0) / 8 * dt)
		tx.WithLabelValues(probe.LinkName(l.Name)).Add(max(l.TxBitsPerSecond, 0) / 8 * dt)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
