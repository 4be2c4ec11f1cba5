package agenttest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/proofkit/nodekit/agent/agenttest"
)

// A fake node at 95 % memory: MemAvailable is 5 % of MemTotal, so an agent
// run with -proc dir/proc reads memory used at 95 %, over the 90 % limit.
func ExampleWriteNode() {
	dir, err := os.MkdirTemp("", "agenttest-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	if err := agenttest.WriteNode(dir, agenttest.Node{MemTotalKiB: 1000000, MemoryUsedPercent: 95}); err != nil {
		panic(err)
	}
	b, err := os.ReadFile(filepath.Join(agenttest.Proc(dir), "meminfo"))
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "MemTotal:") || strings.HasPrefix(line, "MemAvailable:") {
			fmt.Println(strings.Join(strings.Fields(line), " "))
		}
	}
	// Output:
	// MemTotal: 1000000 kB
	// MemAvailable: 50000 kB
}
