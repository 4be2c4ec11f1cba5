package store

import (
	"context"
	"slices"
	"time"
)

// Message types: a notice (an overload started), and, when asked for,
// the end of an overload.
const (
	TypeOverloaded    = "node.overloaded"
	TypeOverloadEnded = "node.overload_ended"
)

// Delivery statuses, as GET /notices and /nodes/X show them.
const (
	StatusPending       = "pending"
	StatusDelivered     = "delivered"
	StatusFailed        = "failed"
	StatusUndeliverable = "undeliverable"
)

// Delivery is one message in the outbox: written when the notice is
// decided, with the body every attempt sends.
type Delivery struct {
	ID   string    `json:"id"` // webhook-id: the same on every attempt, from every replica
	Node string    `json:"node"`
	Type string    `json:"type"`
	At   time.Time `json:"at"` // the notice's (or end's) time, as counted
	// Seq orders a node's messages: the node's readings counted when the
	// message was decided. A node's message is claimed only once none of
	// its messages with a lower Seq is pending.
	Seq     int64     `json:"seq,omitempty"`
	Body    []byte    `json:"body"`    // the message, byte for byte as signed
	Created time.Time `json:"created"` // when the platform decided it, or was asked to send it again: the give-up runs from it
	// What the attempts so far did.
	Status      string    `json:"status"`
	Attempts    int       `json:"attempts"`
	NextAt      time.Time `json:"next_at,omitzero"`
	LastStatus  int       `json:"last_status,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
	// Log is the latest attempts, oldest first, at most maxLog.
	Log []attemptLog `json:"log,omitempty"`
}

// attemptLog is one attempt of a delivery: when, and the receiver's
// status code or the error (never the receiver's URL).
type attemptLog struct {
	At     time.Time `json:"at"`
	Status int       `json:"status,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// maxLog bounds a delivery's log: a day of retries backing off to an
// hour is some 30 attempts; the latest 20 say what is going on.
const maxLog = 20

// DeliveryView is what the API shows of a notice's delivery.
type DeliveryView struct {
	ID          string    `json:"id"`
	Type        string    `json:"type"`
	Status      string    `json:"status"`
	Attempts    int       `json:"attempts"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	LastStatus  int       `json:"last_status,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	// Log is the latest attempts, oldest first: the delivery log.
	Log []attemptLog `json:"log"`
}

// View is what the API shows of d.
func (d *Delivery) View() DeliveryView {
	v := DeliveryView{ID: d.ID, Type: d.Type, Status: d.Status, Attempts: d.Attempts, DeliveredAt: d.DeliveredAt,
		LastStatus: d.LastStatus, LastError: d.LastError, Log: d.Log}
	if v.Log == nil {
		v.Log = []attemptLog{}
	}
	if d.Status == StatusPending {
		v.NextAttempt = d.NextAt
	}
	return v
}

// Outcome is what one attempt did.
type Outcome int

// The outcomes of an attempt.
const (
	OutcomeDelivered Outcome = iota // a 2xx
	OutcomeRetry                    // 408, 429, 5xx, a timeout or a connection error
	OutcomeFailed                   // any other status, or given up
	OutcomeGone                     // 410: the receiver is disabled until the file changes
	OutcomeUndeliverable
	OutcomeRelease // not an attempt: the receiver was busy; due again shortly
)

// OutcomeNames are the outcomes' names, by Outcome, as the
// notifier's metrics label them.
var OutcomeNames = [...]string{"delivered", "retry", "failed", "gone", "undeliverable", "release"}

// String is o's name (OutcomeNames).
func (o Outcome) String() string { return OutcomeNames[o] }

// AttemptResult is an attempt's outcome with what the receiver said.
type AttemptResult struct {
	Outcome Outcome
	Status  int    // the HTTP status, 0 for none
	Err     string // the error, without the URL
	At      time.Time
	Next    time.Time // for a retry: the next attempt
}

// ClaimFilter tells a claim which nodes' deliveries to leave: those whose
// receiver has as many attempts in flight as it may; and how far ahead a
// delivery's next attempt may be scheduled.
type ClaimFilter struct {
	Busy    []string // nodes with a line of their own whose receiver is busy
	AnyBusy bool     // the "*" receiver is busy: only nodes in Own
	Own     []string // nodes with a line of their own
	// Lead is the furthest ahead of now the caller schedules a
	// delivery's next attempt (its longest back-off); zero: the claim's
	// lease. A pending delivery whose next attempt, or claim, runs out
	// further ahead than that and the lease (and ClockSlack) was dated
	// by a clock that has since stepped back, or a replica's far ahead,
	// and is due now (Due).
	Lead time.Duration
}

// Due reports whether a pending delivery whose next attempt, or whose
// claim, is at at may be claimed at now under a lease of lease: at is
// not after now, or lies further ahead than any wait the caller
// schedules (SteppedBack).
func (f ClaimFilter) Due(at, now time.Time, lease time.Duration) bool {
	return !at.After(now) || at.After(f.StepBound(now, lease))
}

// StepBound is the StepBound of a claim at now under a lease of lease:
// a pending delivery whose next attempt, or claim, is after it is Due.
func (f ClaimFilter) StepBound(now time.Time, lease time.Duration) time.Time {
	return StepBound(now, max(f.Lead, lease))
}

// Allows reports whether a claim under f may take a delivery of node.
func (f ClaimFilter) Allows(node string) bool {
	for _, b := range f.Busy {
		if b == node {
			return false
		}
	}
	if !f.AnyBusy {
		return true
	}
	for _, o := range f.Own {
		if o == node {
			return true
		}
	}
	return false
}

// OutboxStore is the outbox of a store: the file store's log, or the
// deliveries table.
type OutboxStore interface {
	// Claim leases up to max due pending deliveries (f.Due) until
	// now+lease, counting an attempt of each, and returns them.
	Claim(ctx context.Context, now time.Time, max int, lease time.Duration, f ClaimFilter) ([]Delivery, error)
	// Settle records the result of the attempt d (as claim returned it).
	Settle(ctx context.Context, d Delivery, res AttemptResult) error
	// ByIDs returns the deliveries of ids that exist.
	ByIDs(ctx context.Context, ids []string) (map[string]Delivery, error)
	// Redeliver makes delivery id due again at now, whatever its status,
	// keeping its id and its log, and Created now, so its give-up runs
	// from the request; false when there is no such delivery.
	Redeliver(ctx context.Context, id string, now time.Time) (bool, error)
	// ByNode returns node's newest deliveries, newest first.
	ByNode(ctx context.Context, node string, limit int) ([]Delivery, error)
	// Counts returns the deliveries by status, and when the oldest
	// pending one was decided (zero: none pending).
	Counts(ctx context.Context) (map[string]int64, time.Time, error)
}

// Apply is d, as claimed, after the attempt res.
func (d Delivery) Apply(res AttemptResult) Delivery {
	if res.Outcome == OutcomeRelease {
		d.Attempts--
		d.NextAt = res.Next
		return d
	}
	d.LastStatus, d.LastError = res.Status, res.Err
	d.Log = append(slices.Clip(d.Log), attemptLog{At: res.At, Status: res.Status, Error: res.Err})
	if len(d.Log) > maxLog {
		d.Log = d.Log[len(d.Log)-maxLog:]
	}
	switch res.Outcome {
	case OutcomeDelivered:
		d.Status, d.DeliveredAt, d.NextAt, d.LastError = StatusDelivered, res.At, time.Time{}, ""
	case OutcomeRetry:
		d.NextAt = res.Next
	case OutcomeFailed, OutcomeGone:
		d.Status, d.NextAt = StatusFailed, time.Time{}
	case OutcomeUndeliverable:
		d.Status, d.NextAt = StatusUndeliverable, time.Time{}
	}
	return d
}
