package pinproxy

import "fmt"

// A link's states, and the one place they change: every write of
// link.state is setState or casState, below, and every move one of these:
//
//	active ──ask──▶ parking ──park──▶ parked ──wake──▶ waking ──resume──▶ active
//	   │               │  └──unpause──▶ active         │
//	   │               └──────────┐                    │
//	   ├──────────── ask (upgrade)┴──▶ moving ◀────────┘ unparkLocked
//	   │                               │  ├──unhold──▶ active
//	   ├──attach, relay──▶ looped ──askLooped──▶ moving   └──release──▶ ended
//	   └── any state ──ended──▶ ended
//
// A link starts active: copied by goroutines (copy.go), or, for one a
// loop dials for (connect_linux.go), held by no one yet. On Linux it
// parks (park_linux.go) or an event loop takes it (looped,
// loop_linux.go); an upgrade holds it while it moves (upgrade_linux.go),
// and gives it back (active, then looped or parked again) if the
// hand-over fails. linkMoves is the diagram as a table.
const (
	// Goroutines copy its bytes (or, dialing, nothing copies yet).
	linkActive int32 = iota
	// The parker has asked its pumps to stop (read deadlines in the past).
	linkParking
	// It waits in the parker's epoll set with no goroutine.
	linkParked
	// Something woke it; its goroutine will run the copy path again.
	linkWaking
	// An upgrade holds the link (upgrade_linux.go): its pumps stopped
	// as for a park, and its run goroutine, if any, waits to learn
	// whether the link was handed over or goes on here.
	linkMoving
	linkEnded // end has run
	// An event loop holds the link (loop_linux.go): no goroutine is its
	// own, and the loop holds its sockets.
	linkLooped
)

// linkMoves lists the states a link may move to from each state (the
// diagram above), as bits.
var linkMoves = [...]uint8{
	linkActive:  1<<linkActive | 1<<linkParking | 1<<linkMoving | 1<<linkLooped | 1<<linkEnded,
	linkParking: 1<<linkParked | 1<<linkActive | 1<<linkMoving | 1<<linkEnded,
	linkParked:  1<<linkWaking | 1<<linkMoving | 1<<linkEnded,
	linkWaking:  1<<linkActive | 1<<linkEnded,
	linkMoving:  1<<linkActive | 1<<linkEnded,
	linkEnded:   1 << linkEnded,
	linkLooped:  1<<linkMoving | 1<<linkEnded,
}

// canMove reports whether a link may move from state from to state to.
func canMove(from, to int32) bool { return linkMoves[from]&(1<<to) != 0 }

// setState moves l to state to. Callers hold l.mu, or own l alone (its
// run goroutine, or its loop, where they say so). Built with the race
// detector, as the tests run, a move the table does not list panics.
func (l *link) setState(to int32) {
	if checkMoves {
		if from := l.state.Load(); !canMove(from, to) {
			panic(fmt.Sprintf("pinproxy: link moved from state %d to %d", from, to))
		}
	}
	l.state.Store(to)
}

// casState moves l from state from to state to, if it is in from.
func (l *link) casState(from, to int32) bool {
	if checkMoves && !canMove(from, to) {
		panic(fmt.Sprintf("pinproxy: link moved from state %d to %d", from, to))
	}
	return l.state.CompareAndSwap(from, to)
}
