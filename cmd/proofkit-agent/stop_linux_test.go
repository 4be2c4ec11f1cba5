package main

import (
	"context"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/proofkit/nodekit/agent/agenttest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// stopBound is the time docs/agent.md gives for the agent to be gone
// after SIGTERM: the watchdog's grace, its last words, and the time the
// process takes to be scheduled and torn down on a machine with CPU to
// spare.
const stopBound = 900 * time.Millisecond

// blockedWriter never returns from Write: a pipe whose reader stopped
// reading.
type blockedWriter struct{ block chan struct{} }

func (w blockedWriter) Write(p []byte) (int, error) { <-w.block; return len(p), nil }

// TestWatchdogIgnoresABlockedStderr: the watchdog's last line to a
// stderr that never drains does not hold the exit past lastWords.
func TestWatchdogIgnoresABlockedStderr(t *testing.T) {
	w := blockedWriter{make(chan struct{})}
	defer close(w.block)
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go watchdog(ctx, 100*time.Millisecond, w, func(code int) { exited <- code })
	start := time.Now()
	cancel()
	select {
	case code := <-exited:
		if code != 1 {
			t.Errorf("exit(%d), want exit(1)", code)
		}
		t.Logf("exit after %v (grace 100ms, last words %v)", time.Since(start), lastWords)
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog never exited: it waited for stderr")
	}
}

// TestStopWithinBound: SIGTERM stops the agent within the documented
// time whatever holds it: a platform that never answers a report in
// flight, and a stderr whose reader stopped reading (a journald that
// does not keep up), which once stopped the agent's readings at the
// first log line that did not fit and kept it from exiting at all. Now
// that costs log lines only: the agent reads on, counts what it
// dropped, and stops at once. Measured from the signal to the process's
// end, as the test sees it; a machine whose CPUs are all busy adds its
// scheduling delays (see docs/agent.md).
func TestStopWithinBound(t *testing.T) {
	dir := node(t, agenttest.Node{MemoryUsedPercent: 40})
	hang, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, tt := range []struct {
		name    string
		blocked bool // stderr a pipe nobody reads
	}{{"platform hangs", false}, {"platform hangs, stderr blocked", true}} {
		t.Run(tt.name, func(t *testing.T) {
			listen := testkit.FreeAddr(t)
			cmd := exec.Command(bin, "-proc", agenttest.Proc(dir), "-sys", agenttest.Sys(dir), "-sysctl", "off",
				"-listen", listen, "-node", "n1", "-log-level", "debug", "-interval", "100ms",
				"-state-dir", t.TempDir(), "-report-url", "http://"+hang.Addr().String()+"/r", "-token-file", tokenFile(t))
			var ended <-chan struct{}
			if !tt.blocked {
				ended = testkit.StartProc(t, cmd, nil).Done()
				time.Sleep(time.Second) // a report in flight to the hung platform
			} else {
				ended = testkit.StartStderrBlocked(t, cmd)
				// It reads every 100 ms (the shortest -interval), and
				// counts the lines it dropped once its buffer (64 KiB,
				// some seconds of debug lines) is full.
				const readings, dropped = "proofkit_agent_readings_total", "proofkit_agent_log_lines_dropped_total"
				testkit.WaitFor(t, "readings taken with stderr blocked", func() bool { return metric(listen, readings) > 5 })
				testkit.WaitFor(t, "log lines dropped and counted", func() bool { return metric(listen, dropped) > 0 })
			}
			took := testkit.Terminate(t, cmd, ended, 20*time.Second)
			t.Logf("stopped %v after SIGTERM, exit status %d", took.Round(time.Millisecond), cmd.ProcessState.ExitCode())
			if took > stopBound {
				t.Errorf("stopped %v after SIGTERM, want within %v", took, stopBound)
			}
		})
	}
}

// metric is the value of the counter name (no labels) served by the
// agent at addr, -1 while it does not answer or serves no such series.
func metric(addr, name string) float64 {
	fams, err := scrape("http://" + addr + "/metrics")
	if err != nil || fams[name] == nil || len(fams[name].Metric) == 0 {
		return -1
	}
	return fams[name].Metric[0].GetCounter().GetValue()
}
