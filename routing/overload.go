package routing

import (
	"slices"
	"time"

	"github.com/proofkit/nodekit/overload"
)

// SetOverload copies into n what the overload package knows of the node:
// OverloadedSince from the tracker (its Since while it is overloaded, else
// zero), OverloadEnded from its latest End event (left as it was when the
// tracker's event list holds none), and MemoryPercent from latest, the
// latest reading the tracker observed. A reading whose memory is missing
// sets MemoryPercent to 0, so unknown memory never counts as above 80 %.
func (n *Node) SetOverload(t *overload.Tracker, latest overload.Reading) {
	n.OverloadedSince = time.Time{}
	if t.Overloaded() {
		n.OverloadedSince = t.Since()
	}
	if end := t.LastEnd(); !end.IsZero() {
		n.OverloadEnded = end
	}
	n.MemoryPercent = latest.MemoryUsedPercent
	if slices.Contains(latest.Missing, overload.InputMemory) {
		n.MemoryPercent = 0
	}
}
