//go:build proofkit_testclock

package main

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/proofkit/nodekit/agent"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/overload/probe"
)

// testClock, in a binary built with -tags proofkit_testclock (the fault
// tests' build, never a release), shifts the agent's wall clock, and so
// each reading's time, by the duration in the file
// $PROOFKIT_AGENT_TEST_CLOCK_FILE ("-1h", "290s"; missing or empty: none),
// read each time: the tests' stand-in for stepping the node's clock, which
// they cannot do to the host. It returns the source to use and the clock
// for agent.Config.Now.
func testClock(src agent.Source) (agent.Source, func() time.Time) {
	file := os.Getenv("PROOFKIT_AGENT_TEST_CLOCK_FILE")
	if file == "" {
		return src, nil
	}
	return shifted{src, file}, func() time.Time { return time.Now().Add(offset(file)) }
}

func offset(file string) time.Duration {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return d
}

type shifted struct {
	agent.Source
	file string
}

func (s shifted) Read(ctx context.Context) (overload.Reading, error) {
	r, err := s.Source.Read(ctx)
	r.At = r.At.Add(offset(s.file))
	return r, err
}

// ReadLinkBytes shifts the reading as Read does and passes the source's
// byte counts on, so the binary's tests see the byte counters the agent
// exports with a real probe (see agent.LinkByteSource).
func (s shifted) ReadLinkBytes(ctx context.Context) (overload.Reading, []probe.LinkBytes, error) {
	bs, ok := s.Source.(agent.LinkByteSource)
	if !ok {
		r, err := s.Read(ctx)
		return r, nil, err
	}
	r, moved, err := bs.ReadLinkBytes(ctx)
	r.At = r.At.Add(offset(s.file))
	return r, moved, err
}
