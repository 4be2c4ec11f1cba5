// Package btcdrun runs internal/testing/btcdlab, a module of its own (so
// btcd stays out of the SDK's go.mod), as part of the main module's
// `go test ./...`: pinproxy in front of two real btcd nodes.
package btcdrun

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestIntegrationBtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short: builds btcd and runs two nodes")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root, to run two btcd nodes and the proxy in a network namespace")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("skipping: no go command to test the btcdlab module with")
	}
	deadline := 8 * time.Minute
	if d, ok := t.Deadline(); ok && time.Until(d)-30*time.Second < deadline {
		deadline = time.Until(d) - 30*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-timeout", deadline.String(), "./...")
	cmd.Dir = "../btcdlab"
	cmd.Env = append(os.Environ(), "GOFLAGS=") // the module's own flags, not -race's
	out, err := cmd.CombinedOutput()
	t.Logf("go test in internal/testing/btcdlab:\n%s", out)
	if err != nil {
		t.Fatalf("btcdlab: %v", err)
	}
}
