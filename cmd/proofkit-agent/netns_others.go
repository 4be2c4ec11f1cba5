//go:build !linux

package main

// checkNetNS leaves the check to the probe, which off Linux has none.
func checkNetNS(string) error { return nil }
