//go:build proofkit_testclock

package agent

import (
	"os"
	"strconv"
)

// testKill, in a binary built with -tags proofkit_testclock (the fault
// tests' build, never a release), kills the process with SIGKILL when
// $PROOFKIT_AGENT_TEST_KILL names this point and seq ("between:3": in the
// Step of seq 3, between queuing its report and saving its seq), so a
// test can crash the agent exactly there.
func testKill(point string, seq uint64) {
	if os.Getenv("PROOFKIT_AGENT_TEST_KILL") == point+":"+strconv.FormatUint(seq, 10) {
		p, err := os.FindProcess(os.Getpid())
		if err == nil {
			_ = p.Kill()
			select {} // the signal ends the process
		}
	}
}
