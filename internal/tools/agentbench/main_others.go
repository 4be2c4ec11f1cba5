//go:build !linux

package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, fmt.Errorf("agentbench: network namespaces and /proc are Linux only: %w", errors.ErrUnsupported))
	os.Exit(1)
}
