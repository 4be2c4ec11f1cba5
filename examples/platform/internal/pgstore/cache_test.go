package pgstore

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/routing"
)

// TestEncodeStateAsNodeFile: the PostgreSQL store's state column, built
// by hand, decodes to what encoding/json's node file without routes does,
// for nodes fresh, overloaded, ended, paused, priced and planned.
func TestEncodeStateAsNodeFile(t *testing.T) {
	rl, err := store.NewRules(store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := &fleet.Fleet{Rules: &rl}
	at := platformtest.T0
	fresh := func(id string) *store.Node {
		n, err := c.NewNode(id)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	read := func(n *store.Node, mems ...float64) *store.Node {
		for _, m := range mems {
			at = at.Add(30 * time.Second)
			r := platformtest.Reading(n.Info.ID, int(n.Readings)+1, m)
			r.At = at
			if _, err := c.Take(n, r, at); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	overloaded := read(fresh("x1"), 95, 95, 95)
	ended := read(fresh("x2"), 95, 95, 95, 40, 40, 40, 40, 40)
	odd := fresh(`x3`)
	odd.Info.Role, odd.Info.Country, odd.Info.Paused, odd.Info.MaxUsers = routing.RoleExit, "DE", true, 7
	odd.NextRoute, odd.EventsSeen = 12, 3
	if err := odd.Prices.Set(at, 120); err != nil {
		t.Fatal(err)
	}
	odd.Info.State = routing.NodeState{PlannedAt: at, UnusedDue: at.Add(time.Hour), Period: 30 * time.Second}
	odd.LastPlan = &routing.Plan{Node: "x3", At: at, State: odd.Info.State}
	odd.Info.OverloadEnded = at.Add(-time.Hour)
	for _, n := range []*store.Node{fresh("x0"), overloaded, ended, read(odd, 95, 95, 95)} {
		want, err := store.EncodeNode(n, false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeState(n)
		if err != nil {
			t.Fatal(err)
		}
		var wf, gf store.NodeFile
		if err := json.Unmarshal(want, &wf); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &gf); err != nil {
			t.Fatalf("%s: %v: %s", n.Info.ID, err, got)
		}
		if !reflect.DeepEqual(gf, wf) {
			t.Errorf("%s:\n got %s\nwant %s", n.Info.ID, got, want)
		}
		if _, err := c.DecodeNode(got); err != nil {
			t.Errorf("%s: decoding %s: %v", n.Info.ID, got, err)
		}
	}
}

// BenchmarkStateCodec: the state column of an overloaded node as the
// PostgreSQL store writes it on every report (by hand, encodeState)
// beside encoding/json's node file without routes (EncodeNode), side by
// side in one run.
func BenchmarkStateCodec(b *testing.B) {
	rl, err := store.NewRules(store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	c := &fleet.Fleet{Rules: &rl}
	n, err := c.NewNode("de-fra-1")
	if err != nil {
		b.Fatal(err)
	}
	at := platformtest.T0
	for i, m := range []float64{95, 95, 95, 40, 95} {
		at = at.Add(30 * time.Second)
		r := platformtest.Reading(n.Info.ID, i+1, m)
		r.At = at
		if _, err := c.Take(n, r, at); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("by-hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeState(n); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := store.EncodeNode(n, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}
