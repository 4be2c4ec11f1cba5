package api_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/notify"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	webhookreceiver "github.com/proofkit/nodekit/examples/webhook-receiver"
)

// TestOperatorReceivers: an operator sets where their nodes' notices go
// (PUT /receiver) and gets a whsec_ secret, shown that once; their
// node's notice goes there, signed with it, while another operator's
// node's still goes where the notify file says. A rotation's new secret
// signs beside the old one for a day (two signatures), then alone. The
// receiver is in the store: another instance (a replica, or a restart)
// delivers to it too. A receiver that fails every attempt for 5 days is
// disabled and sent nothing, until its operator enables it again. The
// admin and a node's agent have no receiver.
func TestOperatorReceivers(t *testing.T) { eachNotifyStore(t, testOperatorReceivers) }

func testOperatorReceivers(t *testing.T, open notifyOpener, replicas int) {
	c := &platformtest.Clock{T: platformtest.T0}
	file := newHook(t, c, platformtest.HookSecret)
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+file.url()+" "+platformtest.HookSecret))
	np := open(c, cfg, dashboardSeed())
	owners := map[string]string{"a1": "alice", "b1": "bob"}
	f := fleet.New(np.Svc, np.n)
	f.Owners = owners
	srv := httptest.NewServer(api.Handler(f, dashboardTokens))
	defer srv.Close()
	web := &apitest.Platform{T: t, Srv: srv}
	do := func(method, path, token, body string) (int, store.ReceiverView, string) {
		t.Helper()
		code, _, b := web.Raw(method, path, token, body)
		var v store.ReceiverView
		json.Unmarshal(b, &v)
		return code, v, string(b)
	}
	for _, tok := range []string{platformtest.TestToken, "tok-a1"} {
		if code, _, _ := do("PUT", "/receiver", tok, `{"url":"http://127.0.0.1:9/"}`); code != 403 {
			t.Errorf("PUT /receiver with %s: %d, want 403", tok, code)
		}
	}
	if code, _, _ := do("GET", "/receiver", "tok-alice", ""); code != 404 {
		t.Errorf("GET /receiver before one is set: %d, want 404", code)
	}
	if code, _, _ := do("PUT", "/receiver", "tok-alice", `{"url":"ftp://example.com/"}`); code != 400 {
		t.Errorf("an ftp:// receiver: %d, want 400", code)
	}
	code, v, body := do("PUT", "/receiver", "tok-alice", `{"url":"http://127.0.0.1:9/placeholder"}`)
	if code != 201 || !strings.HasPrefix(v.Secret, "whsec_") {
		t.Fatalf("alice's first PUT /receiver: %d %s, want 201 with a whsec_ secret", code, body)
	}
	first := v.Secret
	if _, err := notify.DecodeSecret(first); err != nil {
		t.Fatalf("the secret given: %v", err)
	}
	alice := newHook(t, c, first)
	if code, v, body := do("PUT", "/receiver", "tok-alice", `{"url":"`+alice.url()+`"}`); code != 200 || v.Secret != "" || v.URL != alice.url() {
		t.Fatalf("alice's URL changed: %d %s, want 200, the URL, and no secret again", code, body)
	}
	if code, _, body := do("GET", "/receiver", "tok-alice", ""); code != 200 || strings.Contains(body, "whsec_") || strings.Contains(body, `"secret"`) {
		t.Errorf("GET /receiver: %d %s, want 200 without the secret", code, body)
	}
	got := func(h *hook) []hookAttempt {
		t.Helper()
		as, _ := h.snapshot()
		return as
	}

	// A test message on demand, signed with the secret.
	var ta fleet.TestAnswer
	if code, _, body := do("POST", "/receiver/test", "tok-alice", ""); code != 200 || json.Unmarshal([]byte(body), &ta) != nil || !ta.Delivered || ta.Status != 200 {
		t.Fatalf("POST /receiver/test: %d %s, want 200 delivered", code, body)
	}
	if as := got(alice); len(as) != 1 || !as[0].Verified || as[0].Msg.Type != fleet.TypeTest || as[0].ID != ta.ID {
		t.Fatalf("alice's receiver got %+v, want the test message, verified", as)
	}
	if code, _, _ := do("POST", "/receiver/test", "tok-bob", ""); code != 404 {
		t.Errorf("a test of bob's receiver, which he has not set: %d, want 404", code)
	}

	// An overload of each node: a1's notice to alice's receiver, b1's to
	// the notify file's.
	for _, node := range []string{"a1", "b1"} {
		for i := range 3 {
			c.Add(time.Second)
			r := platformtest.Reading(node, i+1, 95)
			r.At = c.Now()
			if _, err := f.Report(t.Context(), r); err != nil {
				t.Fatal(err)
			}
		}
	}
	drain(t, np.n)
	if as := got(alice); len(as) != 2 || !as[1].Verified || as[1].Msg.Data.Node != "a1" || strings.Count(as[1].Headers.Get("webhook-signature"), "v1,") != 1 {
		t.Fatalf("alice's receiver got %+v, want a1's notice, signed once with her secret", as)
	}
	if as := got(file); len(as) != 1 || as[0].Msg.Data.Node != "b1" {
		t.Fatalf("the notify file's receiver got %d messages, want b1's alone", len(as))
	}

	// A rotation: both secrets sign for a day, then the new one alone.
	code, v, body = do("POST", "/receiver/rotate", "tok-alice", "")
	if code != 200 || !strings.HasPrefix(v.Secret, "whsec_") || v.Secret == first || !v.Rotating.Equal(c.Now().Add(store.RotatedFor)) {
		t.Fatalf("rotate: %d %s", code, body)
	}
	second := v.Secret
	var ns []store.NumberedNotice
	if ns, _, _ = f.Notices(t.Context(), 0, 0); len(ns) != 2 {
		t.Fatalf("%d notices, want 2", len(ns))
	}
	a1Notice := ns[0].ID
	if ns[0].Node != "a1" {
		a1Notice = ns[1].ID
	}
	redeliver := func(f *fleet.Fleet, n *notify.Notifier) hookAttempt {
		t.Helper()
		if err := f.Redeliver(t.Context(), a1Notice, nil); err != nil {
			t.Fatal(err)
		}
		drain(t, n)
		as := got(alice)
		return as[len(as)-1]
	}
	a := redeliver(f, np.n)
	if n := strings.Count(a.Headers.Get("webhook-signature"), "v1,"); n != 2 {
		t.Errorf("during the rotation: %d signatures, want 2", n)
	}
	for _, s := range []string{first, second} {
		if _, err := webhookreceiver.Verify([]string{s}, a.Headers, a.Body, a.At); err != nil {
			t.Errorf("during the rotation, a receiver with one of the secrets: %v", err)
		}
	}
	// Another instance on the store knows the receiver, and, a day on,
	// signs with the new secret alone.
	c.Add(store.RotatedFor + time.Minute)
	other := open(c, cfg, dashboardSeed())
	g := fleet.New(other.Svc, other.n)
	g.Owners = owners
	if err := g.Round(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(api.Handler(g, dashboardTokens))
	defer srv2.Close()
	web.Srv = srv2 // the file store's first instance is gone: a restart
	a = redeliver(g, other.n)
	if n := strings.Count(a.Headers.Get("webhook-signature"), "v1,"); n != 1 {
		t.Errorf("a day after the rotation: %d signatures, want 1", n)
	}
	if _, err := webhookreceiver.Verify([]string{first}, a.Headers, a.Body, a.At); err == nil {
		t.Error("a day after the rotation, the old secret still signs")
	}
	if _, err := webhookreceiver.Verify([]string{second}, a.Headers, a.Body, a.At); err != nil {
		t.Errorf("a day after the rotation, the new secret: %v", err)
	}

	// Failing for 5 days disables it; its operator enables it again.
	alice = newHook(t, c, second)
	if code, _, body := do("PUT", "/receiver", "tok-alice", `{"url":"`+alice.url()+`"}`); code != 200 {
		t.Fatalf("alice's receiver moved: %d %s", code, body)
	}
	alice.setAnswer(500)
	a = redeliver(g, other.n)
	_, v, _ = do("GET", "/receiver", "tok-alice", "")
	if a.Status != 500 || !v.FailingSince.Equal(c.Now()) || !v.Disabled.IsZero() {
		t.Fatalf("after a failed attempt: %+v, want failing since now (%v) and not disabled", v, c.Now())
	}
	c.Add(store.FailFor)
	before := len(got(alice))
	redeliver(g, other.n)
	_, v, _ = do("GET", "/receiver", "tok-alice", "")
	if v.Disabled.IsZero() {
		t.Fatalf("after failing for 5 days: %+v, want disabled", v)
	}
	live := []struct {
		f *fleet.Fleet
		n *notify.Notifier
	}{{g, other.n}}
	if replicas > 1 { // the first instance, a replica, takes it in
		if err := f.Round(t.Context()); err != nil {
			t.Fatal(err)
		}
		live = append(live, live[0])
		live[0].f, live[0].n = f, np.n
	}
	for _, tf := range live {
		if err := tf.f.Redeliver(t.Context(), a1Notice, nil); err != nil {
			t.Fatal(err)
		}
		drain(t, tf.n)
	}
	if n := len(got(alice)); n != before+1 {
		t.Errorf("a disabled receiver got %d more messages, want none after the one that disabled it", n-before-1)
	}
	alice.setAnswer(200)
	if code, v, body := do("POST", "/receiver/enable", "tok-alice", ""); code != 200 || !v.Disabled.IsZero() || !v.FailingSince.IsZero() {
		t.Fatalf("enable: %d %s", code, body)
	}
	if a := redeliver(g, other.n); a.Status != 200 || !a.Verified {
		t.Errorf("after enabling: %+v, want delivered", a)
	}
}

// TestOperatorReceiverOnAnotherReplica: an operator's receiver set, or
// moved, through one replica takes the next notice of their node that
// another replica decides and delivers, before that replica's next plan
// round reads every operator's receiver: the notice is neither marked
// undeliverable (no notify file here) nor sent to the URL the operator
// left.
func TestOperatorReceiverOnAnotherReplica(t *testing.T) {
	eachNotifyStore(t, testOperatorReceiverOnAnotherReplica)
}

func testOperatorReceiverOnAnotherReplica(t *testing.T, open notifyOpener, replicas int) {
	if replicas < 2 {
		t.Skip("one process: a receiver set is in force at once")
	}
	c := &platformtest.Clock{T: platformtest.T0}
	cfg := apitest.NotifyConfig("")
	var fs []*fleet.Fleet
	var webs []*apitest.Platform
	for _, np := range []notifyPlatform{open(c, cfg, dashboardSeed()), open(c, cfg)} {
		f := fleet.New(np.Svc, np.n)
		f.Owners = map[string]string{"a1": "alice", "b1": "bob"}
		srv := httptest.NewServer(api.Handler(f, dashboardTokens))
		t.Cleanup(srv.Close)
		f.NotifyUnreached(t.Context(), platformtest.Logger(t)) // as main does at start
		fs, webs = append(fs, f), append(webs, &apitest.Platform{T: t, Srv: srv})
	}
	put := func(url string) string {
		t.Helper()
		code, _, b := webs[0].Raw("PUT", "/receiver", "tok-alice", `{"url":"`+url+`"}`)
		var v store.ReceiverView
		if json.Unmarshal(b, &v); code != 201 && code != 200 {
			t.Fatalf("PUT /receiver on the first replica: %d %s", code, b)
		}
		return v.Secret
	}
	overload := func(seq int) {
		t.Helper()
		for i := range 3 {
			c.Add(time.Second)
			r := platformtest.Reading("a1", seq+i, 95)
			r.At = c.Now()
			if _, err := fs[1].Report(t.Context(), r); err != nil {
				t.Fatal(err)
			}
		}
		drain(t, fs[1].Notify)
	}
	secret := put("http://127.0.0.1:9/placeholder")
	first := newHook(t, c, secret)
	put(first.url())
	overload(1)
	if as, _ := first.snapshot(); len(as) != 1 || !as[0].Verified || as[0].Msg.Data.Node != "a1" {
		ns, _, _ := fs[1].Notices(t.Context(), 0, 0)
		t.Fatalf("alice's receiver, set on the first replica, got %+v from the second; its notices: %+v", as, ns)
	}

	// Moved on the first replica: the second sends the next notice to
	// the new URL.
	second := newHook(t, c, secret)
	put(second.url())
	for i := range 5 {
		c.Add(time.Second)
		r := platformtest.Reading("a1", 10+i, 10)
		r.At = c.Now()
		if _, err := fs[1].Report(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	c.Add(2 * time.Hour) // past the hour between two notices
	overload(20)
	if as, _ := second.snapshot(); len(as) != 1 || !as[0].Verified {
		t.Errorf("alice's moved receiver got %+v, want the second notice", as)
	}
	if as, _ := first.snapshot(); len(as) != 1 {
		t.Errorf("the URL alice left got %d messages, want only the first notice", len(as))
	}
}

// TestOperatorReceiverRotatedTwice: a secret rotated out keeps signing
// for its day when the receiver is rotated again within it (a double
// click on the dashboard's button), beside both newer secrets; at most
// store.MaxRotatedOut rotated out sign at once.
func TestOperatorReceiverRotatedTwice(t *testing.T) {
	eachNotifyStore(t, func(t *testing.T, open notifyOpener, _ int) {
		c := &platformtest.Clock{T: platformtest.T0}
		cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* http://127.0.0.1:9/ "+platformtest.HookSecret))
		np := open(c, cfg, dashboardSeed())
		f := fleet.New(np.Svc, np.n)
		f.Owners = map[string]string{"a1": "alice", "b1": "bob"}
		srv := httptest.NewServer(api.Handler(f, dashboardTokens))
		defer srv.Close()
		web := &apitest.Platform{T: t, Srv: srv}
		secret := func(method, path string) store.ReceiverView {
			t.Helper()
			code, _, b := web.Raw(method, path, "tok-alice", `{"url":"http://127.0.0.1:9/"}`)
			var v store.ReceiverView
			if code/100 != 2 || json.Unmarshal(b, &v) != nil || !strings.HasPrefix(v.Secret, "whsec_") {
				t.Fatalf("%s %s: %d %s", method, path, code, b)
			}
			return v
		}
		secrets := []string{secret("PUT", "/receiver").Secret}
		var v store.ReceiverView
		for i := range store.MaxRotatedOut + 1 {
			c.Add(time.Minute)
			v = secret("POST", "/receiver/rotate")
			secrets = append(secrets, v.Secret)
			if want := platformtest.T0.Add(time.Minute + store.RotatedFor); i == 0 && !v.Rotating.Equal(want) {
				t.Errorf("rotating_until %v, want %v", v.Rotating, want)
			}
		}
		if want := c.Now().Add(store.RotatedFor); !v.Rotating.Equal(want) {
			t.Errorf("after %d rotations, rotating_until %v, want the last rotation's day, %v", store.MaxRotatedOut+1, v.Rotating, want)
		}
		rcv, ok, err := np.Svc.OperatorReceiver(t.Context(), "alice")
		if err != nil || !ok {
			t.Fatalf("alice's receiver in the store: %v %v", ok, err)
		}
		signing := rcv.Signing(c.Now())
		if len(signing) != store.MaxRotatedOut+1 {
			t.Fatalf("%d secrets sign, want the one in force and %d rotated out", len(signing), store.MaxRotatedOut)
		}
		for i, s := range secrets[1:] { // the first, the oldest, is past the bound
			key, err := notify.DecodeSecret(s)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(signing, func(k []byte) bool { return bytes.Equal(k, key) }) {
				t.Errorf("secret %d of %d does not sign %v after it was made", i+2, len(secrets), c.Now().Sub(platformtest.T0))
			}
		}
	})
}
