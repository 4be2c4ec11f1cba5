package api_test

import (
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// TestNotifyClockStepBack: the platform's clock steps back an hour (NTP
// correcting a clock that ran ahead) while a delivery waits out a
// back-off, and while another is claimed by a replica that dies before
// it records its attempt: each is delivered within seconds of the step,
// not an hour later, when the clock has caught up with the times it
// dated before the step. On both stores.
func TestNotifyClockStepBack(t *testing.T) { eachNotifyStore(t, testNotifyClockStepBack) }

func testNotifyClockStepBack(t *testing.T, open notifyOpener, _ int) {
	c := &platformtest.Clock{T: platformtest.T0}
	h := newHook(t, c, platformtest.HookSecret)
	h.down()
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* "+h.url()+" "+platformtest.HookSecret))
	np := open(c, cfg)
	delivered := func(node string) bool {
		t.Helper()
		for _, nt := range np.Notices() {
			if nt.Notice.Node == node {
				return nt.Delivery != nil && nt.Delivery.Status == store.StatusDelivered
			}
		}
		t.Fatalf("no notice of %s", node)
		return false
	}
	within := func(node, what string) {
		t.Helper()
		step := c.Now()
		for c.Now().Sub(step) < 10*time.Second && !delivered(node) {
			drain(t, np.n)
			c.Add(time.Second)
		}
		if !delivered(node) {
			t.Errorf("%s's notice, %s, not delivered within 10 s of the clock's step back an hour", node, what)
		}
	}

	// A back-off dated before the step.
	overloadNode(t, c, "s1", np)
	drain(t, np.n)
	if ns := np.Notices(); len(ns) != 1 || ns[0].Delivery.Status != store.StatusPending || ns[0].Delivery.Attempts != 1 {
		t.Fatalf("notices after an attempt at a receiver that is down: %+v, want one pending after 1 attempt", ns)
	}
	h.up()
	c.Add(-time.Hour)
	within("s1", "waiting out a back-off")

	// A claim dated before the step, by a replica that died in its
	// attempt.
	overloadNode(t, c, "s2", np)
	if ds, err := np.n.Outbox().Claim(t.Context(), c.Now(), 10, cfg.Lease, store.ClaimFilter{}); err != nil || len(ds) != 1 {
		t.Fatalf("claiming s2's delivery: %v, %v", ds, err)
	}
	c.Add(-time.Hour)
	within("s2", "claimed by a replica that died")
}
