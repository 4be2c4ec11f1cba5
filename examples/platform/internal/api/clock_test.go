package api_test

import (
	"slices"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// TestPlatformClockDatesOverloads: an agent whose clock is 10 minutes
// behind the platform's. The overload starts and ends when the platform
// received the readings: the move of a route in use waits the full 15
// minutes from then (not 5), and the cool-down runs from the end as the
// platform saw it; the readings' own times are shown beside.
func TestPlatformClockDatesOverloads(t *testing.T) { eachStore(t, testPlatformClockDatesOverloads) }

func testPlatformClockDatesOverloads(t *testing.T, open opener) {
	c := &platformtest.Clock{T: platformtest.T0}
	tp := open(c, platformtest.Seed())
	const behind = 10 * time.Minute
	seq := uint64(0)
	read := func(mem float64) {
		t.Helper()
		seq++
		r := overload.Reading{Version: 2, Node: "x1", Run: "0123456789abcdef0123456789abcdef", Seq: seq,
			At: c.Now().Add(-behind), MemoryUsedPercent: mem, CPUs: 4, ConntrackMax: 262144}
		if code := tp.Do("POST", "/report", r, nil); code != 200 {
			t.Fatalf("reading %d: %d", seq, code)
		}
		c.Add(30 * time.Second)
	}
	moved := func() bool { return slices.Contains(closedIDs(tp.Node("x1")), "r-move:"+string(routing.ReasonMove)) }
	for range 2 {
		read(95)
	}
	started := c.Now()
	read(95) // the third of 3 in 5: overloaded
	v := tp.Node("x1")
	if !v.Overloaded || !v.Since.Equal(started) || !v.SinceReading.Equal(started.Add(-behind)) {
		t.Fatalf("overloaded %v since %v (reading %v), want since %v, the platform's clock, beside %v",
			v.Overloaded, v.Since, v.SinceReading, started, started.Add(-behind))
	}
	for c.Now().Sub(started) < 14*time.Minute {
		read(95)
		if moved() {
			t.Fatalf("a route in use moved %v after the overload started by the platform's clock (%v by the node's): want 15 minutes",
				c.Now().Sub(started), c.Now().Sub(started.Add(-behind)))
		}
	}
	for c.Now().Sub(started) < 16*time.Minute {
		read(95)
	}
	if !moved() {
		t.Fatalf("no move 16 minutes into the overload: closed %v", closedIDs(tp.Node("x1")))
	}
	var ended time.Time
	for i := 0; tp.Node("x1").Overloaded; i++ {
		if i == 5 {
			t.Fatal("still overloaded after 5 readings at 40 %")
		}
		ended = c.Now()
		read(40)
	}
	v = tp.Node("x1")
	if v.Overloaded || !v.OverloadEnded.Equal(ended) {
		t.Fatalf("overloaded %v, ended %v; want ended at %v, the platform's clock", v.Overloaded, v.OverloadEnded, ended)
	}
	if a := tp.Admit("x1"); a.Admit || !a.Until.Equal(ended.Add(routing.DefaultCoolDown)) {
		t.Fatalf("admit %+v: want the cool-down until %v", a, ended.Add(routing.DefaultCoolDown))
	}
}
