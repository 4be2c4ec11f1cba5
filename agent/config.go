package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strconv"

	"github.com/proofkit/nodekit/internal/procfile"
	"github.com/proofkit/nodekit/overload"
)

// A ConfigError is a Config field that New refuses. Field is the field's
// name in Config ("Interval", "Node"), Value the value as given, formatted
// for a message (strings quoted), and Want what the field takes. A command
// that sets the field from a flag can name the flag instead of the field
// (proofkit-agent does).
type ConfigError struct {
	Field string
	Value string
	Want  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("Config.%s %s: %s", e.Field, e.Value, e.Want)
}

// nodeRule is what a Node must be, as the platform takes it.
const nodeRule = "want " + overload.NodeRule + ", as the platform takes"

// checkNode checks the node name the agent reports under (the host's name
// when cfg.Node is empty): the platform refuses every reading of a name it
// does not take.
func checkNode(cfg Config, node string) error {
	if cfg.ReportURL == "" || overload.CheckNode(node) == nil {
		return nil
	}
	if cfg.Node == "" {
		return &ConfigError{Field: "Node", Value: `""`,
			Want: fmt.Sprintf("the host name %.80q, taken for an empty Node, is not a node name the platform takes: %s; give a Node", node, nodeRule)}
	}
	return &ConfigError{Field: "Node", Value: strconv.Quote(node), Want: nodeRule}
}

// maxCAFile bounds a CA file: a bundle of a few hundred certificates.
const maxCAFile = 1 << 20

// reportClient is the client the reports go with: cfg.HTTPClient, or the
// default client, trusting only the CA certificates of cfg.ReportCA when
// it is given.
func reportClient(cfg Config) (*http.Client, error) {
	if cfg.ReportCA == "" {
		return cfg.HTTPClient, nil
	}
	b, _, err := procfile.Read(context.Background(), cfg.ReportCA, maxCAFile)
	if err != nil {
		return nil, &ConfigError{Field: "ReportCA", Value: strconv.Quote(cfg.ReportCA), Want: "want a PEM file of CA certificates: " + err.Error()}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, &ConfigError{Field: "ReportCA", Value: strconv.Quote(cfg.ReportCA), Want: "no PEM certificate in it; want a PEM file of CA certificates"}
	}
	c := defaultClient()
	c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return c, nil
}
