package pinproxymetrics_test

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxymetrics"
)

// A proxy's upstreams as Prometheus sees them at a scrape: one series per
// upstream, labelled with its address, in the proxy's order of preference.
func ExampleNewCollector() {
	p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{"eu-01:9333", "usa-01:9333"}})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(pinproxymetrics.NewCollector(p))

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range families {
		if !strings.HasPrefix(mf.GetName(), "pinproxy_upstream_live") && mf.GetName() != "pinproxy_upstream_up" {
			continue
		}
		for _, m := range mf.GetMetric() {
			fmt.Printf("%s{upstream=%q} %v\n", mf.GetName(), m.GetLabel()[0].GetValue(), m.GetGauge().GetValue())
		}
	}
	// Output:
	// pinproxy_upstream_live_connections{upstream="eu-01:9333"} 0
	// pinproxy_upstream_live_connections{upstream="usa-01:9333"} 0
	// pinproxy_upstream_up{upstream="eu-01:9333"} 0
	// pinproxy_upstream_up{upstream="usa-01:9333"} 0
}
