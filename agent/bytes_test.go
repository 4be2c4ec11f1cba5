package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/overload/probe"
)

// kernelSource stands in for the probe over a kernel whose byte counters
// grow by what the test sends: each reading is dated by a wall clock the
// test steps, its rate is the bytes over the kernel's own (monotonic) 30 s
// between readings, and ReadLinkBytes gives the counters' growth, as
// *probe.Probe does.
type kernelSource struct {
	mu        sync.Mutex
	wall      time.Time
	rx, tx    uint64 // the kernel's counters
	prx, ptx  uint64 // at the previous reading
	read      bool   // a reading was taken
	plainRead bool   // Read was called (ReadLinkBytes must be)
}

func (k *kernelSource) Read(ctx context.Context) (overload.Reading, error) {
	k.mu.Lock()
	k.plainRead = true
	k.mu.Unlock()
	r, _, err := k.ReadLinkBytes(ctx)
	return r, err
}

func (k *kernelSource) ReadLinkBytes(context.Context) (overload.Reading, []probe.LinkBytes, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r := overload.Reading{
		Version: overload.ReadingVersion, At: k.wall, MemoryUsedPercent: 40,
		Load15: 0.5, CPUs: 2, ConntrackEntries: 10, ConntrackMax: 1000,
	}
	var moved []probe.LinkBytes
	if k.read {
		drx, dtx := k.rx-k.prx, k.tx-k.ptx
		r.Links = []overload.Link{{Name: "eth0", RxBitsPerSecond: float64(drx) * 8 / 30, TxBitsPerSecond: float64(dtx) * 8 / 30, SpeedMbps: 1000}}
		moved = []probe.LinkBytes{{Name: "eth0", RxBytes: drx, TxBytes: dtx}}
	}
	k.read, k.prx, k.ptx = true, k.rx, k.tx
	return r, moved, nil
}

// step moves the wall clock by wall and the counters by rx and tx bytes.
func (k *kernelSource) step(wall time.Duration, rx, tx uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.wall = k.wall.Add(wall)
	k.rx += rx
	k.tx += tx
}

// TestByteCountersFollowTheKernel: the exported byte counters grow by the
// kernel's counts, whatever the wall clock does: stepped 10 minutes
// forward, 10 minutes back, and running 0.5 % fast (30.15 s a 30 s
// interval). They once added rate × the wall-clock time between readings,
// so the step forward added 20 times the traffic and the fast clock read
// 0.5 % high.
func TestByteCountersFollowTheKernel(t *testing.T) {
	wall := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	src := &kernelSource{wall: wall}
	a, err := New(Config{Node: "n1", Source: src, Interval: time.Hour, Now: func() time.Time {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.wall
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	if _, err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	var sentRx, sentTx uint64
	send := func(wall time.Duration, rx, tx uint64) {
		t.Helper()
		src.step(wall, rx, tx)
		sentRx += rx
		sentTx += tx
		if _, err := a.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		send(30*time.Second, 1_000_000+uint64(i), 125_000)
	}
	send(10*time.Minute+30*time.Second, 5_000_000, 5_000_000)  // stepped forward
	send(-10*time.Minute+30*time.Second, 5_000_000, 5_000_000) // and back
	for range 100 {
		send(30150*time.Millisecond, 1_052_134_116/100, 3) // 0.5 % fast
	}
	if got := testCounter(t, a, `proofkit_agent_network_receive_bytes_total{device="eth0"}`); got != float64(sentRx) {
		t.Errorf("receive counter %.0f, kernel's growth %d", got, sentRx)
	}
	if got := testCounter(t, a, `proofkit_agent_network_transmit_bytes_total{device="eth0"}`); got != float64(sentTx) {
		t.Errorf("transmit counter %.0f, kernel's growth %d", got, sentTx)
	}
	if src.plainRead {
		t.Error("the agent called Read of a source that has ReadLinkBytes")
	}
}

// TestByteCountersWithoutKernelCounts: from a Source without
// ReadLinkBytes the counters add rate × the monotonic time between
// readings: a wall clock stepped 10 minutes forward between two readings
// taken a moment apart adds a moment's traffic, not 10 minutes'.
func TestByteCountersWithoutKernelCounts(t *testing.T) {
	src := newFakeSource() // eth0 receives 1 MB/s
	wall := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	a, err := New(Config{Node: "n1", Source: src, Interval: time.Hour, Now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return wall
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	start := time.Now()
	for i := range 3 {
		if i == 2 {
			mu.Lock()
			wall = wall.Add(10 * time.Minute)
			mu.Unlock()
			src.mu.Lock()
			src.at = src.at.Add(10 * time.Minute)
			src.mu.Unlock()
		}
		if _, err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start).Seconds()
	got := testCounter(t, a, `proofkit_agent_network_receive_bytes_total{device="eth0"}`)
	if got > 1e6*elapsed {
		t.Errorf("receive counter %.0f after %.3f s at 1 MB/s: it followed the wall clock's step", got, elapsed)
	}
}
