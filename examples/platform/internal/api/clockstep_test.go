package api_test

import (
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// TestOverloadClockStepBack: the platform's clock runs two hours ahead
// of the node's and is put right an hour at a time, once during an
// overload and once during the cool-down after it. The overload's
// start, dated an hour ahead of the corrected clock, is dated again by
// it, so routes in use are moved after the move delay from then, not
// an hour later; the end likewise, so the node is offered again at
// most a cool-down after the correction, not an hour and a cool-down.
// On both stores.
func TestOverloadClockStepBack(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		c := &platformtest.Clock{T: platformtest.T0.Add(2 * time.Hour)}
		tp := open(c, platformtest.Seed())
		seq := 0
		read := func(mem float64) {
			t.Helper()
			seq++
			c.Add(time.Second)
			r := overload.Reading{Version: 2, Node: "x1", Run: platformtest.RunID, Seq: uint64(seq), At: platformtest.T0.Add(time.Duration(seq) * time.Second),
				MemoryUsedPercent: mem, CPUs: 4, ConntrackMax: 262144}
			if code, _, _ := tp.Post("/report", r); code != 200 {
				t.Fatalf("reading %d: %d", seq, code)
			}
		}
		for range 3 {
			read(95)
		}
		if v := tp.Node("x1"); !v.Overloaded || !v.Since.Equal(c.Now()) {
			t.Fatalf("after 3 readings at 95 %%: overloaded %v since %v, want since %v", v.Overloaded, v.Since, c.Now())
		}
		c.Add(-time.Hour)
		read(95)
		if v := tp.Node("x1"); !v.Overloaded || v.Since.After(c.Now()) {
			t.Errorf("after the clock stepped back an hour: overloaded %v since %v, after now (%v): moves put off by the step", v.Overloaded, v.Since, c.Now())
		}
		for i := 0; tp.Node("x1").Overloaded; i++ {
			if i == 10 {
				t.Fatal("x1 still overloaded after 10 readings at 40 %")
			}
			read(40)
		}
		c.Add(-time.Hour)
		read(40)
		v := tp.Node("x1")
		if v.OverloadEnded.After(c.Now()) {
			t.Errorf("after the clock stepped back an hour in the cool-down: the overload ended at %v, after now (%v): offered again only at %v",
				v.OverloadEnded, c.Now(), routing.Policy{}.OfferedAgain(v.OverloadEnded))
		}
		if v.OverloadEnded.Before(c.Now().Add(-2 * time.Second)) {
			t.Errorf("after the clock stepped back an hour in the cool-down: the overload ended at %v, before the reading that saw the step (%v): the cool-down shortened",
				v.OverloadEnded, c.Now().Add(-time.Second))
		}
	})
}

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
