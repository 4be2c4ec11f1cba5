package agent

import (
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// deliveryMetrics count what became of the readings on their way to the
// platform, beside metrics' reports_* series.
type deliveryMetrics struct {
	reportsRefused   *prometheus.CounterVec
	reportsDuplicate prometheus.Counter
	readingsDropped  *prometheus.CounterVec
}

func newDeliveryMetrics(reg prometheus.Registerer) (*deliveryMetrics, error) {
	dm := &deliveryMetrics{
		reportsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proofkit_agent_reports_refused_total",
			Help: "Answers refusing a report, by the platform's reason: older (409), invalid (400, 422, other 4xx), too_large (413), unknown_node: the report is dropped; unauthorized (401, 403): it is kept and sent again. Never counted as sent.",
		}, []string{"reason"}),
		reportsDuplicate: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "proofkit_agent_reports_duplicate_total",
			Help: "Reports the platform answered it already had (a retry after a lost answer or a crash); also counted in proofkit_agent_reports_sent_total.",
		}),
		readingsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proofkit_agent_readings_dropped_total",
			Help: "Readings taken but never queued as reports, by reason: invalid (the agent's own tracker refused it), older, duplicate.",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{dm.reportsRefused, dm.reportsDuplicate, dm.readingsDropped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{"older", "invalid", "too_large", "unknown_node", "unauthorized"} {
		dm.reportsRefused.WithLabelValues(r)
	}
	dm.readingsDropped.WithLabelValues("invalid")
	return dm, nil
}

// RedactURL returns s with the userinfo (user and password) of the URL
// in it replaced by "xxxxx", for logs and errors; a string that does not
// parse as a URL is returned as "(unparsable URL)", since it may hold a
// password in a place url.Parse could not find, and so is one with an @
// and no host (user:password@host without a scheme parses as the scheme
// "user"). An empty s stays empty.
func RedactURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || (u.Host == "" && strings.Contains(s, "@")) {
		return "(unparsable URL)"
	}
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	return u.String()
}

// warnCredentials warns, at start-up, about a token that others can read
// or that goes over the network in the clear: a token file readable by
// group or others, a report URL with userinfo (never sent: the agent sends
// the bearer token), and a token sent over plain http:// to a host that is
// not loopback.
func warnCredentials(log *slog.Logger, cfg Config) {
	if cfg.TokenFile != "" {
		if fi, err := os.Stat(cfg.TokenFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("the token file can be read by other users; make it readable by the agent's user only (chmod 600)",
				"file", cfg.TokenFile, "mode", fi.Mode().Perm().String())
		}
	}
	if cfg.ReportURL == "" {
		return
	}
	u, err := url.Parse(cfg.ReportURL)
	if err != nil {
		return
	}
	if u.User != nil {
		log.Warn("the report URL holds a user name or password; it is not sent (the agent sends its bearer token) and is redacted from the log",
			"report_url", RedactURL(cfg.ReportURL))
	}
	if u.Scheme == "http" && (cfg.Token != "" || cfg.TokenFile != "") && !loopback(u.Hostname()) {
		log.Warn("the token goes over plain http to a host that is not loopback, readable on the way; use an https:// report URL",
			"report_url", RedactURL(cfg.ReportURL))
	}
}

// loopback says whether host names this machine: localhost, or a loopback
// address.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
