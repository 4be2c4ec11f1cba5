//go:build !linux

package sysctl

import (
	"errors"
	"fmt"
)

// Plan reads the kernel's settings; only Linux has them.
func Plan(cfg Config) (Report, error) {
	return Report{}, fmt.Errorf("sysctl plan: %w", errors.ErrUnsupported)
}

// Apply raises the kernel's settings; only Linux has them.
func Apply(cfg Config) (Report, error) {
	return Report{}, fmt.Errorf("sysctl apply: %w", errors.ErrUnsupported)
}
