//go:build !linux

package sysctl

import (
	"errors"
	"fmt"
)

// run fails off Linux: only Linux has the kernel's settings.
func run(_ Config, apply bool) (Report, error) {
	op := "plan"
	if apply {
		op = "apply"
	}
	return Report{}, fmt.Errorf("sysctl %s: %w", op, errors.ErrUnsupported)
}
