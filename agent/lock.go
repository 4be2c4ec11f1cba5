package agent

import (
	"errors"
	"fmt"
)

// ErrLocked means the state directory is locked by another agent: two
// agents on one state directory would each keep their own tracker and
// could each send a notice within the same hour. It comes wrapped, with
// the directory and, when the lock file says it, the other agent's pid.
var ErrLocked = errors.New("locked by another agent")

// StateDirError is New's error for a Config.StateDir it cannot make,
// lock or write in. Err says what failed; it wraps ErrLocked when another
// agent holds the directory.
type StateDirError struct {
	Dir string
	Err error
}

func (e *StateDirError) Error() string { return "state directory " + e.Dir + ": " + e.Err.Error() }
func (e *StateDirError) Unwrap() error { return e.Err }

// Close releases the state directory's lock, so that another agent may
// use the directory. Call it once Run has returned (or the last Step);
// the agent is not to be used after. Closing an agent that has no state
// directory, or closing twice, does nothing.
func (a *Agent) Close() error {
	a.lockMu.Lock()
	defer a.lockMu.Unlock()
	if a.lock == nil {
		return nil
	}
	err := a.lock.Close()
	a.lock = nil
	if err != nil {
		return fmt.Errorf("close agent: release state directory lock: %w", err)
	}
	return nil
}
