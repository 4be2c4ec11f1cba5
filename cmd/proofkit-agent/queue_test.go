package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/agent/agenttest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// TestLargeQueueFile: an agent whose state directory holds a queue file
// of 2 GiB, one line of 2 GiB between six reports, starts, becomes ready
// with a peak RSS far below the file, logs what it skipped and dropped,
// and leaves a small file for the next start. It once died at every
// start, out of memory at 4.3 GB.
func TestLargeQueueFile(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: reads 2 GiB")
	}
	state := t.TempDir()
	path := filepath.Join(state, "reports.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	line := func(seq int) string {
		return fmt.Sprintf(`{"v":2,"node":"node-1","run":"r0","seq":%d,"at":"2026-12-03T09:00:%02dZ","memory_used_percent":40,"cpus":2,"conntrack_max":100}`+"\n", seq, seq)
	}
	var head strings.Builder
	for seq := 1; seq <= 3; seq++ {
		head.WriteString(line(seq))
	}
	f.WriteString(head.String())
	if _, err := f.Seek(int64(head.Len())+2<<30, 0); err != nil { // a hole: 2 GiB of NUL bytes
		t.Fatal(err)
	}
	f.WriteString("\n" + line(4) + line(5) + line(6))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	dir := node(t, agenttest.Node{MemoryUsedPercent: 40})
	a := start(t, dir, "-sysctl", "off", "-interval", "5m", "-state-dir", state, "-queue-max", "4")
	// Reading 2 GiB of a sparse file takes 1-15 s here, with the load.
	testkit.WaitForWithin(t, 2*time.Minute, "the first reading", func() bool { return a.count("reading") >= 1 })
	hwm := testkit.ProcMemory(t, a.Cmd.Process.Pid, "VmHWM")
	if code := a.stop(); code != 0 {
		t.Errorf("exit status %d", code)
	}
	t.Logf("peak RSS %d MiB with a queue file of 2 GiB", hwm>>20)
	if hwm > 64<<20 {
		t.Errorf("peak RSS %d MiB, want at most 64", hwm>>20)
	}
	log := a.log()
	for _, want := range []string{
		`msg="report queue: skipped a line that is not one report (cut by a crash or a full disk?); the lines after it are kept"`,
		`offset=` + strconv.Itoa(head.Len()) + ` length=2147483648 reason="longer than 1 MiB"`,
		`msg="report queue held more than its bound; dropped the oldest" dropped=2 queue_max=4 reason=overflow run=r0 seqs=2,3`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() > 64<<10 {
		t.Errorf("queue file after the start: %v, %v; want rewritten small", fi.Size(), err)
	}
}
