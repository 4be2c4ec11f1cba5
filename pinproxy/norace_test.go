//go:build !race

package pinproxy

const raceEnabled = false
