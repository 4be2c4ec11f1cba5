//go:build !linux && !darwin

package main

// fileLimit reports no open-file limit: -max-conns then defaults to none.
func fileLimit() (uint64, bool) { return 0, false }
