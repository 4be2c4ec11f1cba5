package pricing

import "errors"

// Errors callers may branch on; every error this package returns wraps one
// of them, with context that says what was wrong and where.
var (
	// ErrInvalid: a negative price, a time outside the supported range
	// (1970 to 2200), a window out of range, or malformed JSON.
	ErrInvalid = errors.New("invalid")
	// ErrOutOfOrder: a price change not after the last change.
	ErrOutOfOrder = errors.New("out of order")
	// ErrNoPrice: an instant before the node's first price.
	ErrNoPrice = errors.New("no price")
	// ErrPruned: an instant or a session older than what the history
	// still holds after Prune.
	ErrPruned = errors.New("pruned")
	// ErrOutsideSession: an instant before a session's start or after its
	// end. A closed route earns nothing more.
	ErrOutsideSession = errors.New("outside the session")
	// ErrOverflow: an amount or a byte count that does not fit its
	// integer type. Sums are checked, never wrapped.
	ErrOverflow = errors.New("overflow")
)
