// Package prometheus holds no Go code: it holds nodekit's overload rule as
// Prometheus recording and alerting rules over the agent's metrics
// (nodekit-overload.rules.yml, selecting job="proofkit-agent"), their
// promtool unit tests (nodekit-overload.test.yml), an Alertmanager route
// (alertmanager.yml) and a Grafana dashboard of the agent and the proxy
// (grafana-nodekit.json), so a fleet that already runs Prometheus reaches
// the same verdicts as github.com/proofkit/nodekit/overload. See
// README.md.
package prometheus
