package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

func waitAddr(t *testing.T, out *testkit.LogBuffer, msg string) string {
	t.Helper()
	re := regexp.MustCompile(`msg="` + msg + `" .*?\baddr=(\S+)`)
	var m []string
	testkit.WaitFor(t, fmt.Sprintf("%q in the log", msg), func() bool {
		m = re.FindStringSubmatch(out.String())
		return m != nil
	})
	return m[1]
}

// TestService runs the service in process: two clients land on the two
// upstreams (least used first), /proxy/stats shows them, Stats are logged
// on the timer, and cancelling (SIGTERM) drains and exits 0.
func TestService(t *testing.T) {
	// Each upstream answers a client's line with its name and the line, so
	// a client learns where it landed once bytes went both ways.
	a := pinproxytest.New(t, "eu-01", pinproxytest.Line).Addr
	b := pinproxytest.New(t, "usa-01", pinproxytest.Line).Addr
	out := &testkit.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-http", "127.0.0.1:0",
			"-upstream", a + "," + b, "-stats-every", "50ms", "-drain", "500ms"}, out, nil)
	}()
	proxyAddr := waitAddr(t, out, "proxy listening")
	apiAddr := waitAddr(t, out, "http listening")

	var names []string
	for _, id := range []string{"c1", "c2"} {
		_, name := pinproxytest.Dial(t, proxyAddr, id) // open until the test ends
		names = append(names, name)
	}
	if names[0] != "eu-01" || names[1] != "usa-01" {
		t.Fatalf("clients landed on %v, want [eu-01 usa-01] (least used, ties to the first listed)", names)
	}

	resp, err := http.Get("http://" + apiAddr + "/proxy/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st statsView
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st.Totals.Live != 2 || st.Upstreams[0].Live != 1 || st.Upstreams[1].Live != 1 {
		t.Fatalf("stats %+v, want one live connection on each upstream", st)
	}
	resp, err = http.Get("http://" + apiAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Fatalf("/readyz with both upstreams up: %s %q, want 200 ok", resp.Status, body)
	}
	testkit.WaitFor(t, "the stats in the log", func() bool { return strings.Contains(out.String(), " upstream="+b+" live=1 ") })

	cancel() // as SIGTERM does
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d, want 0\n%s", code, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("did not stop")
	}
	// The two clients were still connected: the drain time ran out and
	// the service closed them.
	if !strings.Contains(out.String(), `msg="drain time over; closed the connections left"`) {
		t.Fatalf("log lacks the forced close after the drain:\n%s", out.String())
	}
	if !strings.Contains(out.String(), `component=pinproxy`) || !strings.Contains(out.String(), `msg=stopped`) {
		t.Fatalf("log lacks the proxy's decisions or the stop:\n%s", out.String())
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{nil, 2},
		{[]string{"-upstream", "no-port"}, 2},
		{[]string{"-upstream", "a:1", "x"}, 2},
		{[]string{"-upstream", "a:1", "-drain", "-1s"}, 2},
	} {
		out := &testkit.LogBuffer{}
		if code := run(context.Background(), tc.args, out, nil); code != tc.code {
			t.Errorf("%q: exit %d, want %d\n%s", tc.args, code, tc.code, out)
		}
	}
}
