//go:build linux || darwin

package main

import "syscall"

// fileLimit returns the process's open-file limit (the soft
// RLIMIT_NOFILE, which the Go runtime raises to the hard one at start).
func fileLimit() (uint64, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == ^uint64(0) || rl.Cur > 1<<40 {
		return 0, false
	}
	return rl.Cur, true
}
