// Package prometheus holds no Go code: it holds nodekit's overload rule as
// Prometheus recording and alerting rules over node_exporter's metrics
// (nodekit-overload.rules.yml), their promtool unit tests
// (nodekit-overload.test.yml) and an Alertmanager route
// (alertmanager.yml), so a fleet that already runs Prometheus reaches the
// same verdicts as github.com/proofkit/nodekit/overload. See README.md.
package prometheus
