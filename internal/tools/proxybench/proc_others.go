//go:build !linux

package main

import (
	"errors"
	"fmt"
	"os/exec"
)

func setDeathSignal(cmd *exec.Cmd) {}

func startOn(cmd *exec.Cmd, cpus []int) error {
	if cpus != nil {
		return fmt.Errorf("-pin: %w here (Linux only)", errors.ErrUnsupported)
	}
	return cmd.Start()
}

func pinSelf([]int) error {
	return fmt.Errorf("-pin: %w here (Linux only)", errors.ErrUnsupported)
}
