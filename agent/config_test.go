package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// TestNewChecksNode: an agent that reports refuses, at New, a node name
// the platform would refuse every reading of; a standalone one takes any.
func TestNewChecksNode(t *testing.T) {
	long := strings.Repeat("n", 65)
	_, err := New(Config{Node: long, Source: newFakeSource(), ReportURL: "http://127.0.0.1:1/", Token: "t"})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Node" || !strings.Contains(err.Error(), "want 1 to 64") {
		t.Fatalf("New with a 65-character node = %v, want a ConfigError of Node saying the rule", err)
	}
	a, err := New(Config{Node: long, Source: newFakeSource()})
	if err != nil {
		t.Fatalf("standalone New with a 65-character node = %v, want nil", err)
	}
	a.Close()
}

// TestNewChecksReportURL: a report URL no dial could ever reach is a
// ConfigError of ReportURL at New, never a retry loop; the error gives
// the URL without its password.
func TestNewChecksReportURL(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"ftp://127.0.0.1/r", "want an http:// or https:// URL"},
		{"http:///r", "want an http:// or https:// URL"},
		{"http://127.0.0.1:99999/r", "port 99999: want 1 to 65535"},
		{"https://ops:s3cret@127.0.0.1:0/r", `"https://xxxxx@127.0.0.1:0/r": port 0: want 1 to 65535`},
	} {
		_, err := New(Config{Node: "n1", Source: newFakeSource(), ReportURL: tt.url, Token: "t"})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "ReportURL" || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("New with report URL %q = %v, want a ConfigError of ReportURL saying %q", tt.url, err, tt.want)
		}
	}
}

// testCA makes a CA and a certificate it signs for 127.0.0.1, and writes
// the CA's certificate as PEM to a file; it returns the file and the
// server's certificate.
func testCA(t *testing.T) (caFile string, server tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "platform test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "platform"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestReportCA: with ReportCA the agent trusts a platform whose
// certificate its own CA signs, over real TLS; without it the same
// platform is not trusted and the report stays queued.
func TestReportCA(t *testing.T) {
	caFile, cert := testCA(t)
	var got atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"admit": true})
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()

	t.Run("trusted", func(t *testing.T) {
		a, err := New(Config{Node: "n1", Source: newFakeSource(), ReportURL: srv.URL, Token: "t", ReportCA: caFile, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		reportOne(t, a)
		testkit.WaitFor(t, "the report delivered over TLS", func() bool { return a.q.len() == 0 })
		if got.Load() == 0 {
			t.Fatal("the platform got nothing")
		}
	})
	t.Run("system roots", func(t *testing.T) {
		logs := &testkit.LogBuffer{}
		a, err := New(Config{Node: "n1", Source: newFakeSource(), ReportURL: srv.URL, Token: "t",
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		reportOne(t, a)
		testkit.WaitFor(t, "a failed attempt logged", func() bool { return strings.Contains(logs.String(), "certificate") })
		if a.q.len() != 1 {
			t.Fatalf("queue holds %d reports, want the one kept", a.q.len())
		}
	})
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"not PEM", Config{ReportURL: srv.URL, ReportCA: writeFile(t, "not a certificate")}, "no PEM certificate in it"},
		{"missing", Config{ReportURL: srv.URL, ReportCA: "/nonexistent/ca.pem"}, "no such file or directory"},
		{"a device", Config{ReportURL: srv.URL, ReportCA: "/dev/zero"}, "not a regular file"},
		{"plain http", Config{ReportURL: "http://127.0.0.1:1/", ReportCA: caFile}, "needs an https:// report URL"},
		{"with a client", Config{ReportURL: srv.URL, ReportCA: caFile, HTTPClient: http.DefaultClient}, "both ReportCA and HTTPClient"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Node, tt.cfg.Source, tt.cfg.Token = "n1", newFakeSource(), "t"
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
