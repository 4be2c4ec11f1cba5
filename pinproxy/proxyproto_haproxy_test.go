package pinproxy_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy"
)

// HAProxy as the upstream, its bind with accept-proxy, reads the client's
// address from the header the proxy sends, in both versions, and answers
// with it.
func TestIntegrationSendProxyHAProxy(t *testing.T) {
	testkit.NeedTools(t, "haproxy")
	addr := testkit.FreeAddr(t)
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	conf := `global
defaults
  mode http
  timeout client 30s
  timeout connect 30s
  timeout server 30s
frontend f
  bind ` + addr + ` accept-proxy
  http-request return status 200 content-type text/plain lf-string "src=%ci:%cp\n"
`
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	hp := testkit.StartProc(t, exec.Command("haproxy", "-f", cfg, "-db"), nil)
	testkit.WaitFor(t, "haproxy to listen on "+addr, func() bool {
		select {
		case <-hp.Done():
			t.Fatalf("haproxy exited:\n%s", hp.Log.String())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	for _, v := range []int{1, 2} {
		p := newProxy(t, pinproxy.Config{Upstreams: []string{addr}, RebalanceInterval: -1, SendProxy: v})
		front := serve(t, p)
		c := mustDial(t, front)
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		want := fmt.Sprintf("src=%s\n", c.LocalAddr())
		if !strings.HasSuffix(string(resp), "\r\n\r\n"+want) {
			t.Errorf("v%d: haproxy answered %q, want a body of %q\nhaproxy's log:\n%s", v, resp, want, hp.Log.String())
		}
	}
}
