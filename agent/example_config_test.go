package agent_test

import (
	"errors"
	"fmt"

	"github.com/proofkit/nodekit/agent"
)

// A command maps a refused field to its own flag.
func ExampleConfigError() {
	_, err := agent.New(agent.Config{Source: nil})
	fmt.Println(err)
	_, err = agent.New(agent.Config{Source: steadySource(), Node: "de fra 1", ReportURL: "https://platform.example/r", Token: "t"})
	var ce *agent.ConfigError
	if errors.As(err, &ce) {
		fmt.Printf("-%s %s: %s\n", map[string]string{"Node": "node"}[ce.Field], ce.Value, ce.Want)
	}
	// Output:
	// new agent: no reading source (Config.Source)
	// -node "de fra 1": want 1 to 64 of A-Z a-z 0-9 . _ - (not starting with . _ -), as the platform takes
}

func steadySource() agent.Source { return &steady{} }
