package agent_test

import (
	"context"
	"fmt"
	"time"

	"github.com/proofkit/nodekit/agent"
	"github.com/proofkit/nodekit/overload"
)

// steady is a Source whose node has memory at 93 %, a reading a second.
type steady struct{ at time.Time }

func (s *steady) Read(context.Context) (overload.Reading, error) {
	s.at = s.at.Add(time.Second)
	return overload.Reading{At: s.at, MemoryUsedPercent: 93, CPUs: 4, ConntrackMax: 262144}, nil
}

func Example() {
	a, err := agent.New(agent.Config{
		Node:   "exit-fra-1",
		Source: &steady{at: time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)},
		// StateDir: "/var/lib/proofkit-agent", ReportURL: …, Token: …
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 { // Run does this every Interval
		res, err := a.Step(context.Background())
		if err != nil {
			fmt.Println(err)
			return
		}
		if res.Notice != nil {
			fmt.Println(res.Notice)
		}
	}
	st := a.Status()
	fmt.Println(st.Node, "overloaded:", st.Overloaded, "since", st.Since.Format(time.TimeOnly))
	// Output:
	// exit-fra-1 is overloaded: memory at 93 %
	// exit-fra-1 overloaded: true since 06:00:03
}
