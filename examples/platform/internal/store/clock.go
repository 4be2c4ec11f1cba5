package store

import "time"

// ClockSlack is how far apart the replicas' clocks may be before a time
// one of them stored ahead of another's now is taken for a clock that
// stepped back. Clocks kept by NTP are within milliseconds of each
// other; a clock corrected by a step (NTP putting right a clock that
// ran ahead, an operator's date -s) is usually out by seconds or more.
const ClockSlack = 5 * time.Second

// SteppedBack reports whether due, a time stored as now plus a wait of
// at most lead, lies too far ahead of now to have been stored that way
// by a clock that reads now: the clock that stored it has since stepped
// back (or was a replica's, ahead of this one by more than ClockSlack).
// Such a time is due at once: waiting for it would put off the work by
// the whole step, an hour for a clock an hour ahead. Taking it as due
// puts the work at most lead early; a wait that is meant to hold longer
// than lead must not be judged by this.
func SteppedBack(due, now time.Time, lead time.Duration) bool {
	return due.After(StepBound(now, lead))
}

// StepBound is the latest time a clock reading now stores as now plus a
// wait of at most lead, give or take ClockSlack: a time after it is
// SteppedBack. A query that looks for such times compares with it.
func StepBound(now time.Time, lead time.Duration) time.Time {
	return now.Add(lead + ClockSlack)
}
