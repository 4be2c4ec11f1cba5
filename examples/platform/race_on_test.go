//go:build race

package main

// raceEnabled: the race detector allocates beside the code it checks.
const raceEnabled = true
