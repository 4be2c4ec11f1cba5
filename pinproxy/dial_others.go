//go:build !linux

package pinproxy

// canAbortConnect is false off Linux: every dial keeps its context.
const canAbortConnect = false

func abortConnect(uintptr) {}
