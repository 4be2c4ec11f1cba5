package notify

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// TestParseReceivers: the notify file's lines, and errors naming the line.
func TestParseReceivers(t *testing.T) {
	good := "# comment\n\nx1 https://ops.example/hook " + platformtest.HookSecret + " " + platformtest.HookSecret2 + "\n* http://127.0.0.1:9/all " + platformtest.HookSecret + "\n"
	rs, err := parseReceivers("notify", strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if r := rs.ForNode("x1"); r == nil || len(r.Secrets) != 2 || r.Line != 3 {
		t.Fatalf("x1: %+v", r)
	}
	if r := rs.ForNode("y"); r == nil || r.Node != "*" || r.Host() != "127.0.0.1:9" {
		t.Fatalf("y: %+v", r)
	}
	for _, c := range []struct{ file, want string }{
		{"x1 https://a/ whsec_c2hvcnQ=\n", "notify:1: node x1: secret 1: 5 bytes: want at least 24"},
		{"\nx1 https://a/ " + platformtest.HookSecret + "\nx1 https://b/ " + platformtest.HookSecret + "\n", "notify:3: node x1 has a line already (line 2)"},
		{"x1 ftp://a/ " + platformtest.HookSecret + "\n", "notify:1: node x1: the URL is not an absolute http:// or https:// URL"},
		{"x1 https://a/\n", "notify:1: want NODE URL SECRET [SECRET…], got 2 field(s)"},
		{"x1 https://a/ s3cr3t-not-whsec\n", `notify:1: node x1: secret 1: want "whsec_"`},
		{"bad/node https://a/ " + platformtest.HookSecret + "\n", "notify:1: the first field is neither a node"},
		// A line out of order: its URL's credential or its secret is
		// not repeated.
		{"https://ops:s3cr3t@a/ x1 " + platformtest.HookSecret + "\n", "notify:1: the first field is neither a node"},
		{"whsec_s3cr3tMfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw x1 https://a/\n", "notify:1: the first field is neither a node"},
		{"x1 https://a/ whsec_!!!\n", "notify:1: node x1: secret 1: not base64"},
	} {
		_, err := parseReceivers("notify", strings.NewReader(c.file))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.file, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
}

// TestSign: the Standard Webhooks specification's example signature.
func TestSign(t *testing.T) {
	key, err := DecodeSecret(platformtest.HookSecret)
	if err != nil {
		t.Fatal(err)
	}
	got := sign([][]byte{key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}

func TestClassifyStatus(t *testing.T) {
	for code, want := range map[int]store.Outcome{200: store.OutcomeDelivered, 204: store.OutcomeDelivered, 301: store.OutcomeFailed, 400: store.OutcomeFailed,
		401: store.OutcomeFailed, 404: store.OutcomeFailed, 408: store.OutcomeRetry, 410: store.OutcomeGone, 429: store.OutcomeRetry, 500: store.OutcomeRetry, 503: store.OutcomeRetry} {
		if got := classifyStatus(code); got != want {
			t.Errorf("%d: %v, want %v", code, got, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	base, most := 10*time.Second, time.Hour
	for n, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 5: 160 * time.Second, 12: time.Hour, 40: time.Hour} {
		if lo, hi := Backoff(base, most, n, 0), Backoff(base, most, n, 1); lo != want/2 || hi != want {
			t.Errorf("attempt %d: %v to %v, want %v to %v", n, lo, hi, want/2, want)
		}
	}
}

// TestRetryAfter: a receiver's Retry-After in seconds or as an HTTP date
// is the wait it asks for; anything else asks for none.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		v    string
		want time.Duration
	}{
		{"120", 2 * time.Minute},
		{" 5 ", 5 * time.Second},
		{"-3", 0},
		{"Thu, 03 Dec 2026 09:10:00 GMT", 10 * time.Minute},
		{"Thursday, 03-Dec-26 09:00:30 GMT", 30 * time.Second}, // RFC 850
		{"Thu Dec  3 09:01:00 2026", time.Minute},              // asctime
		{"Thu, 03 Dec 2026 08:00:00 GMT", 0},                   // past
		{"soon", 0},
		{"", 0},
	} {
		resp := &http.Response{Header: http.Header{"Retry-After": {tt.v}}}
		if got := retryAfter(resp, now); got != tt.want {
			t.Errorf("Retry-After %q: %v, want %v", tt.v, got, tt.want)
		}
	}
}

// TestPublicOnly: with PublicOnly an operator's receiver on a loopback
// address is refused as the connection is made, and the notify file's
// receiver at the same address still gets its message; without it both
// do.
func TestPublicOnly(t *testing.T) {
	got := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got++
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL + "/hook")
	if err != nil {
		t.Fatal(err)
	}
	secret, err := DecodeSecret(platformtest.HookSecret)
	if err != nil {
		t.Fatal(err)
	}
	file := &Receiver{Node: "*", URL: u, Secrets: [][]byte{secret}}
	own := &Receiver{Operator: "alice", URL: u, Secrets: [][]byte{secret}}
	d := store.Delivery{ID: "ntc_x_1", Body: []byte(`{}`), Created: time.Now()}
	for _, public := range []bool{false, true} {
		got = 0
		n := New(Config{PublicOnly: public, Timeout: 5 * time.Second}, nil, nil, nil, nil)
		if res := n.Attempt(t.Context(), file, d); res.Outcome != store.OutcomeDelivered {
			t.Errorf("public only %v: the file's receiver: %v %s", public, res.Outcome, res.Err)
		}
		res := n.Attempt(t.Context(), own, d)
		switch {
		case !public && res.Outcome != store.OutcomeDelivered:
			t.Errorf("the operator's receiver: %v %s", res.Outcome, res.Err)
		case public && (res.Outcome == store.OutcomeDelivered || !strings.Contains(res.Err, "127.0.0.1 is not a public address")):
			t.Errorf("public only: the operator's receiver on loopback: %v %q, want it refused", res.Outcome, res.Err)
		}
		if want := map[bool]int{false: 2, true: 1}[public]; got != want {
			t.Errorf("public only %v: the server got %d messages, want %d", public, got, want)
		}
	}
	for addr, ok := range map[string]bool{
		"8.8.8.8:443": true, "[2a00:1450::1]:443": true, "100.63.255.255:80": true,
		"127.0.0.1:80": false, "[::1]:80": false, "10.1.2.3:80": false, "172.16.0.1:80": false,
		"192.168.1.1:80": false, "169.254.169.254:80": false, "100.64.0.1:80": false, "0.1.2.3:80": false,
		"0.0.0.0:80": false, "[::]:80": false, "[fd00::1]:80": false, "[fe80::1]:80": false,
		"[::ffff:127.0.0.1]:80": false, "224.0.0.1:80": false,
	} {
		if err := refuseNonPublic("tcp", addr, nil); (err == nil) != ok {
			t.Errorf("%s: %v, want allowed %v", addr, err, ok)
		}
	}
}
