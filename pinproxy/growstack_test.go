package pinproxy

import (
	"runtime"
	"sync"
	"testing"
)

// growStack leaves a fresh goroutine with an 8 KiB stack: grown in one
// step, enough for the dial, and no more.
func TestGrowStack(t *testing.T) {
	if raceEnabled {
		t.Skip("skipping: the race detector changes stack sizes")
	}
	const n = 1000
	perGoroutine := func(grow bool) uint64 {
		var ready, release sync.WaitGroup
		ready.Add(n)
		release.Add(1)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range n {
			go func() {
				if grow {
					growStack(0)
				}
				ready.Done()
				release.Wait()
			}()
		}
		ready.Wait()
		runtime.ReadMemStats(&after)
		release.Done()
		return (after.StackInuse - before.StackInuse) / n
	}
	base := perGoroutine(false)
	grown := perGoroutine(true)
	if base > 3<<10 {
		t.Fatalf("a fresh goroutine holds %d B of stack, want the runtime's 2 KiB", base)
	}
	if grown < 7<<10 || grown > 9<<10 {
		t.Fatalf("after growStack a goroutine holds %d B of stack, want 8 KiB", grown)
	}
}
