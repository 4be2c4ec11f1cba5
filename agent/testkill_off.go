//go:build !proofkit_testclock

package agent

// testKill does nothing: only a binary built with -tags
// proofkit_testclock lets a test kill the agent at a point of its Step
// (testkill_testclock.go).
func testKill(string, uint64) {}
