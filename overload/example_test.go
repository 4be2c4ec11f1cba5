package overload_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/proofkit/nodekit/overload"
)

// A node's memory passes its limit in three readings 30 s apart, and its
// connection table drops connections in the same three: the third
// reading starts the overload, with one notice naming both.
func Example() {
	tr := overload.NewTracker("eu-01", overload.DefaultLimits())
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i, mem := range []float64{91.2, 95, 92.4} {
		r := overload.Reading{
			Version:           overload.ReadingVersion,
			Run:               "5f0c1e2a9b7d4c3e8a6f1b2d3c4e5f60", // the agent's, kept with its state
			Seq:               uint64(i + 1),
			At:                start.Add(time.Duration(i) * 30 * time.Second),
			MemoryUsedPercent: mem,
			Load15:            3.1,
			CPUs:              8,
			ConntrackEntries:  250000,
			ConntrackMax:      262144,
			ConntrackDrops:    uint64(12 + 25*i),
			Missing:           []overload.Input{overload.InputBandwidth},
		}
		res, err := tr.Observe(r)
		if err != nil {
			fmt.Println(err)
			return
		}
		if res.Event != nil {
			fmt.Println(res.Event.Kind, res.Event.At.Format(time.TimeOnly))
		}
		if res.Notice != nil {
			fmt.Println(res.Notice)
		}
	}
	// Output:
	// start 12:01:00
	// eu-01 is overloaded: memory at 92 %; the connection table at 95 % (250000 of 262144); the connection table was full: 62 connections dropped
}

// The platform decodes a reading from the wire and keeps each node's
// tracker state in its database between readings.
func ExampleRestoreTracker() {
	var r overload.Reading
	err := json.Unmarshal([]byte(`{"v":1,"node":"eu-01","at":"2026-11-30T12:00:00Z",
		"memory_used_percent":94,"load15":0.5,"cpus":4,
		"missing":["conntrack","conntrack_drops"]}`), &r)
	if err != nil {
		fmt.Println(err)
		return
	}
	saved := []byte(`{"v":1,"node":"eu-01","last_reading":"2026-11-30T11:59:30Z",
		"checks":{"memory":{"window":"011","last":{"check":"memory","text":"memory at 93 %","at":"2026-11-30T11:59:30Z","value":93.1,"limit":90}}},
		"overloaded":false}`)
	tr, err := overload.RestoreTracker(saved, overload.Limits{})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := tr.Observe(r)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Event.Kind, res.Notice)
	state, err := json.Marshal(tr) // back to the database
	if err != nil {
		fmt.Println(err)
		return
	}
	again, err := overload.RestoreTracker(state, overload.Limits{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(again.Overloaded(), again.Since().Format(time.TimeOnly), again.LastNotice().Format(time.TimeOnly))
	// Output:
	// start eu-01 is overloaded: memory at 94 %
	// true 12:00:00 12:00:00

}

// A platform counts version 2 readings by run and seq: the retry of a
// reading whose answer was lost is a duplicate, acknowledged and not
// counted again, and a reading dated before the previous one (the node's
// clock was stepped back and its agent started afresh) is counted just
// after it.
func ExampleTracker_Observe_retry() {
	tr := overload.NewTracker("eu-01", overload.Limits{})
	reading := func(run string, seq uint64, h, m, s int) overload.Reading {
		return overload.Reading{
			Version: overload.ReadingVersion, Run: run, Seq: seq,
			At:                time.Date(2026, 11, 30, h, m, s, 0, time.UTC),
			MemoryUsedPercent: 40, Load15: 0.5, CPUs: 4,
			Missing: []overload.Input{overload.InputConntrack, overload.InputConntrackDrops, overload.InputBandwidth},
		}
	}
	for _, r := range []overload.Reading{
		reading("9b1f40c2d8e7a6b5c4d3e2f1a0b9c8d7", 1, 12, 0, 0),
		reading("9b1f40c2d8e7a6b5c4d3e2f1a0b9c8d7", 2, 12, 0, 30),
		reading("9b1f40c2d8e7a6b5c4d3e2f1a0b9c8d7", 2, 12, 0, 30), // a retry
		reading("0e6c2a8f4b1d9e7c5a3f1b8d6e4c2a0f", 1, 11, 1, 0),  // a new run, its clock an hour behind
	} {
		res, err := tr.Observe(r)
		switch {
		case errors.Is(err, overload.ErrDuplicate):
			fmt.Println("seq", r.Seq, "again: already counted")
		case err != nil:
			fmt.Println(err)
		default:
			fmt.Println("seq", r.Seq, "counted at", res.At.Format(time.TimeOnly))
		}
	}
	// Output:
	// seq 1 counted at 12:00:00
	// seq 2 counted at 12:00:30
	// seq 2 again: already counted
	// seq 1 counted at 12:00:31
}

// A status page lists each check's latest figure against its limit
// from the check table, so a new check needs no page code.
func ExampleCheck_Describe() {
	r := overload.Reading{MemoryUsedPercent: 92.4, Load15: 3.1, CPUs: 4,
		ConntrackEntries: 1200, ConntrackMax: 262144, ListenDrops: 2,
		Missing: []overload.Input{overload.InputConntrackDrops, overload.InputBandwidth}}
	for _, c := range overload.Checks() {
		fig, limit := c.Describe(&r, overload.Limits{})
		if slices.Contains(r.Missing, c.Input()) {
			fig = "unknown"
		}
		fmt.Printf("%-15s %-24s %s\n", c, fig, limit)
	}
	// Output:
	// memory          92.4 %                   above 90 %
	// load            3.10 on 4 CPUs           above 8 (2 × 4 CPUs)
	// conntrack_fill  0.5 % (1200 of 262144)   80 % or more
	// conntrack_drops unknown                  more than 0 dropped
	// listen_queue    2 dropped                10 or more dropped
	// bandwidth       unknown                  above 80 % of a link
}

// The findings of an overload's start, one text each, as the agent and
// the platform log them (`findings=["memory at 92 %" ...]`).
func ExampleTexts() {
	r := overload.Reading{
		At:                time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		MemoryUsedPercent: 92.4,
		Load15:            17.3,
		CPUs:              8,
		ConntrackEntries:  1000,
		ConntrackMax:      262144,
		ConntrackDrops:    37,
		Links:             []overload.Link{{Name: "eth0", RxBitsPerSecond: 870e6, SpeedMbps: 1000}},
	}
	for _, text := range overload.Texts(overload.Evaluate(r, overload.DefaultLimits())) {
		fmt.Println(text)
	}
	// Output:
	// memory at 92 %
	// load average 17.3 over 15 minutes, above twice the 8 CPU cores
	// the connection table was full: 37 connections dropped
	// bandwidth at 870 Mbit/s, 87 % of the 1 Gbit/s link eth0
}

func ExampleCheckNode() {
	fmt.Println(overload.CheckNode("de-fra-1"))
	fmt.Println(overload.CheckNode("de fra 1"))
	// Output:
	// <nil>
	// node "de fra 1": want 1 to 64 of A-Z a-z 0-9 . _ - (not starting with . _ -)
}
