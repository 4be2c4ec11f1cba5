package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

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

// checkReportURL says what is wrong with a report URL, as a
// *ConfigError whose Value hides a password: the URL must be http:// or
// https:// with a host, a port (if any) of 1 to 65535, and no fragment,
// white space or bytes that are not UTF-8. url.Parse takes some of these
// (a fragment, which is never sent; a trailing space, sent as %20; a
// Latin-1 byte), and each would send every report where nobody meant.
func checkReportURL(raw string) error {
	value := raw // as given, when there is no userinfo to hide
	if strings.Contains(raw, "@") {
		value = RedactURL(raw)
	}
	bad := func(want string) error {
		return &ConfigError{Field: "ReportURL", Value: strconv.Quote(value), Want: want}
	}
	const want = "want an http:// or https:// URL"
	if !utf8.ValidString(raw) {
		return bad("not valid UTF-8; " + want)
	}
	if i := strings.IndexFunc(raw, unicode.IsSpace); i >= 0 {
		return bad(fmt.Sprintf("white space at byte %d; %s", i+1, want))
	}
	u, err := url.Parse(raw)
	if err != nil {
		reason := "unparsable"
		var ue *url.Error
		if errors.As(err, &ue) {
			reason = ue.Err.Error() // without the URL, which may hold a password
		}
		if !strings.Contains(raw, "://") {
			reason += ", and no scheme"
		}
		return bad(reason + "; " + want)
	}
	switch {
	case u.Scheme == "" || !strings.Contains(raw, "://"):
		// "user:password@host/r" parses as the scheme "user".
		return bad("no scheme; " + want)
	case u.Scheme != "http" && u.Scheme != "https":
		return bad(want)
	case u.Host == "":
		return bad("no host; " + want)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return bad(fmt.Sprintf("a fragment (#%s) is never sent; want the URL without it", u.Fragment))
	}
	// url.Parse takes any digits as a port; a dial would refuse it at
	// every report, for ever.
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return bad("port " + p + ": want 1 to 65535")
		}
	}
	return nil
}
