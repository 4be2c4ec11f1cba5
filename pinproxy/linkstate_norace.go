//go:build !race

package pinproxy

// checkMoves: without the race detector, a link's state changes unchecked.
const checkMoves = false
