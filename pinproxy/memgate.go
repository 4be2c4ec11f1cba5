package pinproxy

import (
	"sync"
	"time"
)

// memoryGate lets a proxy give memory back to the kernel
// (debug.FreeOSMemory, a whole GC of the process) at most once a minute,
// whichever of its parker (a wave of parks) and its event loops (a wave
// of connections) asks. The zero value is ready: the first ask is let
// through.
type memoryGate struct {
	mu    sync.Mutex
	freed time.Time // when memory was last given back
}

// take reports whether memory may be given back at now, and if so counts
// it as given back then; the caller calls debug.FreeOSMemory.
func (g *memoryGate) take(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.freed.IsZero() && now.Sub(g.freed) < time.Minute {
		return false
	}
	g.freed = now
	return true
}
