package overload

import "time"

// ReadingVersion is the version of the Reading wire format an agent of
// this package sends, as "v".
//
// Version 2 adds "run" and "seq", which make delivery idempotent and
// ordering independent of the node's wall clock:
//
//   - run names one agent state: a random id the agent makes when it starts
//     with no saved state and keeps with that state, across restarts. A
//     new run means the node's history was lost (new disk, state deleted)
//     or could not be kept (the state could not be saved).
//   - seq numbers the readings of a run, 1, 2, 3, … with no reading taken
//     twice under one number. The agent saves the next number with its
//     state, so a restart goes on where it stopped; a gap means readings
//     were dropped (and the agent counted them as dropped).
//   - at stays the instant the reading was taken, but the agent spaces it
//     by the monotonic clock: each reading's at is the later of the wall
//     clock and the previous reading's at plus the monotonic time elapsed
//     since it (one second, across a restart). A wall clock stepped back
//     therefore never dates a reading before the previous one, and a step
//     forward is taken as it comes.
//
// A receiver (the platform; [Tracker.Observe]) orders a version 2 reading
// by seq within its run, not by at: a reading whose seq is not above the
// last one observed in the same run is a duplicate (a retry after a lost
// answer), acknowledged and not counted again ([ErrDuplicate]), unless it
// is dated after the last observed reading: a retry repeats a reading
// whole and is never dated so, so such a reading comes from a node rolled
// back to a snapshot, and it is counted and its run goes on from its seq;
// the same holds within each of the four runs observed before the
// latest, so a late retry from a run the node has left is a duplicate
// too. A reading
// of another run is counted as the start of that run, whatever its at,
// and so is one with a higher seq in the same run, a gap included. Either
// is counted at its own at or, when that is not after the last observed
// reading's, one second after the last observed reading (the agent's own
// step across a restart), so events and the notice hour never run
// backwards; [Result.At] says which. While a node's readings are counted
// so, its times advance a second a reading: an overload lasts, and the
// notice hour passes, by the counted times, so a notice is held back
// rather than sent early.
//
// The receiver keeps the last run and seq with the node's state ("last_run"
// and "last_seq" in a [Tracker]'s JSON, the earlier runs' in
// "earlier_runs"), so a retry is a duplicate after a restart too. A
// version 1 reading in between makes the last run an earlier one: the
// next version 2 reading above its seq goes on with it.
//
// Version 1 readings (no run, no seq) keep version 1's meaning: they are
// ordered by at, and one not newer than the last is refused (one at the
// same instant as a duplicate, an older one as out of order). A receiver
// accepts both versions; an agent sends version 2. A reading without a
// run is ordered as version 1 whatever its "v" (a probe fills in a
// reading before the agent numbers it); [Reading.Validate] checks that
// run and seq come together.
const ReadingVersion = 2

// Input names one input of a Reading. A reading lists the inputs it could
// not measure in Missing; a check whose input is missing counts as not
// passed in that reading.
type Input string

// The inputs a Reading carries.
const (
	InputMemory         Input = "memory"          // MemTotal and MemAvailable
	InputLoad           Input = "load"            // the 15-minute load average and the CPU count
	InputConntrack      Input = "conntrack"       // conntrack entries and the table's max
	InputConntrackDrops Input = "conntrack_drops" // connections dropped because the table was full
	InputListenDrops    Input = "listen_drops"    // connections dropped by full listen queues
	InputBandwidth      Input = "bandwidth"       // per-link rates and link speeds
)

// Reading is one report of one node at one instant.
//
// Counters that only grow in the kernel (drops, link bytes) are carried as
// deltas since the previous reading; the probe computes them. Field names
// in JSON are stable: they are the agent→platform wire format.
type Reading struct {
	// Version is the wire format version: ReadingVersion (2), or 1 for a
	// reading of an agent that predates it.
	Version int `json:"v"`
	// Node names the node the reading is of (may be empty when the
	// receiver knows it from elsewhere).
	Node string `json:"node,omitempty"`
	// At is when the reading was taken (see ReadingVersion for how the
	// agent keeps it from running backwards).
	At time.Time `json:"at"`
	// Run names the agent state the reading belongs to (version 2; empty
	// in version 1). See ReadingVersion.
	Run string `json:"run,omitempty"`
	// Seq numbers the readings of a run from 1 (version 2; 0 in version 1).
	Seq uint64 `json:"seq,omitempty"`

	// MemoryUsedPercent is (MemTotal − MemAvailable) / MemTotal × 100.
	MemoryUsedPercent float64 `json:"memory_used_percent"`
	// Load15 is the 15-minute load average.
	Load15 float64 `json:"load15"`
	// CPUs is the number of CPUs the node's processes may run on.
	CPUs int `json:"cpus"`

	// ConntrackEntries is the number of entries in the conntrack table.
	ConntrackEntries uint64 `json:"conntrack_entries"`
	// ConntrackMax is the table's size (nf_conntrack_max).
	ConntrackMax uint64 `json:"conntrack_max"`
	// ConntrackDrops counts connections dropped because the table was
	// full, since the previous reading.
	ConntrackDrops uint64 `json:"conntrack_drops"`

	// ListenDrops counts connections dropped by full listen (accept)
	// queues since the previous reading.
	ListenDrops uint64 `json:"listen_drops"`
	// Listeners is an optional per-listener picture of the accept queues
	// at the instant of the reading. It is information: no check uses it.
	Listeners []Listener `json:"listeners,omitempty"`

	// Links holds each network link's rate over the interval since the
	// previous reading and its speed. Loopback and links that are down are
	// left out.
	Links []Link `json:"links,omitempty"`

	// Missing lists the inputs that could not be measured for this
	// reading, in no particular order.
	Missing []Input `json:"missing,omitempty"`
	// Notes says, in words, why inputs are missing or degraded (no
	// CAP_NET_ADMIN, no conntrack module, first reading has no deltas).
	Notes []string `json:"notes,omitempty"`
}

// Link is one network link in a Reading.
type Link struct {
	// Name is the link's name, e.g. "eth0".
	Name string `json:"name"`
	// RxBitsPerSecond and TxBitsPerSecond are the link's receive and
	// transmit rates since the previous reading.
	RxBitsPerSecond float64 `json:"rx_bps"`
	TxBitsPerSecond float64 `json:"tx_bps"`
	// SpeedMbps is the link's speed in Mbit/s (as in
	// /sys/class/net/IF/speed, or given by the operator); 0 means unknown,
	// and then the bandwidth check is not passed for this link.
	SpeedMbps uint64 `json:"speed_mbps,omitempty"`
}

// Listener is one listening socket's accept queue.
type Listener struct {
	// Addr is the local address, host:port.
	Addr string `json:"addr"`
	// Queue is the number of connections waiting to be accepted
	// (idiag_rqueue for a listener).
	Queue uint32 `json:"queue"`
	// Backlog is the accept queue's limit (idiag_wqueue for a listener).
	Backlog uint32 `json:"backlog"`
}
