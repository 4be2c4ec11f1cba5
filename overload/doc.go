// Package overload decides when a node that carries other people's
// long-lived connections is overloaded, with the platform's exact rules.
//
// A [Reading] is one report of one node at one instant: memory used, the
// 15-minute load average against the CPU count, the kernel's connection
// (conntrack) table and the connections it dropped when full, connections
// dropped by full listen queues, and bandwidth against link speed. It is
// also the wire format between the node agent and the platform (JSON,
// `"v": 2`, with a run and a seq that order readings whatever the node's
// clock does; version 1 readings are still accepted, see
// [ReadingVersion]). [Reading.Validate] refuses figures that cannot be
// true, naming the field.
//
// A node is overloaded when a threshold is passed "and it stays that way in
// 3 of 5 readings": each check keeps its own window of the last five
// readings. A [Tracker] (one per node) observes readings in order, produces
// Start and End events, and a [Notice] that names every check that holds,
// in figures ("memory at 92 %"), at most one an hour for a node.
//
// A check "holds" when it passed in at least 3 of its last 5 readings
// (Limits.Need of Limits.Window); the node is overloaded while any check
// holds, and stays overloaded until none does. A check whose input the
// reading lists as missing counts as not passed. Figures in findings and
// notices come from the latest reading in which that check passed, and
// are rounded to whole percent (one decimal for the load average), with
// more places shown when rounding would print the limit itself: memory at
// 90.4 % against "over 90 %" reads "memory at 90.4 %", never "90 %".
//
//	tr := overload.NewTracker("eu-01", overload.Limits{}) // zero: the defaults
//	for r := range readings { // one every 30 s, in order
//		res, err := tr.Observe(r)
//		if err != nil { // ErrDuplicate (a retry), ErrOutOfOrder, ErrInvalidReading
//			log.Printf("reading refused: %v", err)
//			continue
//		}
//		if res.Notice != nil {
//			send(res.Notice.Text) // "eu-01 is overloaded: memory at 92 %"
//		}
//	}
//	state, _ := json.Marshal(tr) // keep it; overload.RestoreTracker reads it back
//
// The package is pure: time comes in with each reading and nothing here
// calls time.Now or does I/O, so the agent and the platform, which both
// import it, reach the same verdict from the same readings.
package overload
