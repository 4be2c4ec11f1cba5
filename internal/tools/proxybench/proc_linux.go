package main

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill cmd if the harness dies first, so no
// proxy or sink outlives a run.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
