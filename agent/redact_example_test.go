package agent_test

import (
	"fmt"

	"github.com/proofkit/nodekit/agent"
)

// A report URL as it may be logged: the user and password never are.
func ExampleRedactURL() {
	fmt.Println(agent.RedactURL("https://node-7:s3cret@platform.example/api/v1/readings"))
	fmt.Println(agent.RedactURL("https://platform.example/api/v1/readings"))
	// Output:
	// https://xxxxx@platform.example/api/v1/readings
	// https://platform.example/api/v1/readings
}
