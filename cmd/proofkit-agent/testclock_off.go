//go:build !proofkit_testclock

package main

import (
	"time"

	"github.com/proofkit/nodekit/agent"
)

// testClock leaves src and the clock as they are: only a binary built
// with -tags proofkit_testclock lets a test shift its clock
// (testclock.go).
func testClock(src agent.Source) (agent.Source, func() time.Time) { return src, nil }
