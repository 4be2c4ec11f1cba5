//go:build race

package pinproxy

// checkMoves: built with the race detector (the tests), every change of a
// link's state is checked against linkMoves.
const checkMoves = true
