package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/agent/agenttest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/sysctl"
)

// The operators' help: the agent "sets the table, the network buffers and
// the backlogs to the machine's memory at every start", and where it may
// not, "leaves them as a file, config/99-proofkit-sysctl.conf beside its
// compose file: copy it to /etc/sysctl.d/, run sudo sysctl --system and
// restart the agent". With no -sysctl flags at all, on a fake /proc/sys
// (never the real one) whose somaxconn it may not write, the agent raises
// the other keys, leaves somaxconn, and writes the file in config/ under
// its working directory, saying what to do with it.
func TestSeedSizesAtEveryStartByDefault(t *testing.T) {
	dir := node(t, agenttest.Node{MemTotalKiB: 16 << 20})
	if err := agenttest.WriteSysctl(dir, agenttest.KernelDefaults()); err != nil {
		t.Fatal(err)
	}
	// Mode 0444 is how the kernel shows a key this process may not set.
	if err := os.Chmod(filepath.Join(agenttest.Proc(dir), "sys/net/core/somaxconn"), 0o444); err != nil {
		t.Fatal(err)
	}
	compose := t.TempDir()
	t.Chdir(compose) // the agent inherits it: where its compose file is

	for start1 := range 2 { // every start: the second finds the raised values
		a := start(t, dir, "-interval", "5m", "-state-dir", filepath.Join(compose, "state"))
		testkit.WaitFor(t, "the first reading", func() bool { return a.count("reading") >= 1 })
		if code := a.stop(); code != 0 {
			t.Fatalf("start %d: exit status %d", start1+1, code)
		}
		if n := a.count("sysctl"); n != 9 {
			t.Errorf("start %d: logged %d sysctl lines, want one per key (9)", start1+1, n)
		}
		if !strings.Contains(a.log(), "copy the file to /etc/sysctl.d/, run sudo sysctl --system, restart the agent") {
			t.Errorf("start %d: the log does not say what to do with the file", start1+1)
		}
	}
	if got, _ := agenttest.ReadSysctl(dir, sysctl.KeyTCPMaxSynBacklog); got == "1024" {
		t.Errorf("tcp_max_syn_backlog still at the kernel's 1024")
	}
	if got, _ := agenttest.ReadSysctl(dir, sysctl.KeySomaxconn); got != "4096" {
		t.Errorf("somaxconn, which the agent may not write, reads %s", got)
	}
	b, err := os.ReadFile(filepath.Join(compose, "config", sysctl.FileName))
	if err != nil {
		t.Fatalf("no config/%s beside the compose file: %v", sysctl.FileName, err)
	}
	if !strings.Contains(string(b), "\nnet.core.somaxconn = ") || strings.Contains(string(b), "tcp_max_syn_backlog =") {
		t.Errorf("the file should set somaxconn alone:\n%s", b)
	}
}
