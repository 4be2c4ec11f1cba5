package store

import "time"

// OperatorReceiver is an operator's own receiver of their nodes'
// notices, which the operator sets through the API: it takes the place
// of the notify file's line for each of the operator's nodes.
type OperatorReceiver struct {
	URL string `json:"url"`
	// Secrets sign its messages, the newest first; a secret rotated out
	// signs them beside the new one until its Until.
	Secrets []OperatorSecret `json:"secrets"`
	Created time.Time        `json:"created"`
	// FailingSince is the first failed attempt since the last delivered
	// one (zero: none failing); Disabled, when the receiver was disabled
	// for failing FailFor (zero: enabled). A disabled receiver is sent
	// nothing until its operator enables it again.
	FailingSince time.Time `json:"failing_since,omitzero"`
	Disabled     time.Time `json:"disabled,omitzero"`
}

// FailFor is how long a receiver fails every attempt before it is
// disabled.
const FailFor = 5 * 24 * time.Hour

// OperatorSecret is one of a receiver's secrets.
type OperatorSecret struct {
	Key   []byte    `json:"key"`
	Until time.Time `json:"until,omitzero"` // zero: in force; else rotated out, signing until then
}

// RotatedFor is how long a secret rotated out still signs messages
// beside the new one, so a receiver has a day to take the new one.
const RotatedFor = 24 * time.Hour

// MaxRotatedOut is the most secrets rotated out that still sign beside
// the one in force: a secret rotated again within its day keeps the
// day it was given, up to this many rotations a day.
const MaxRotatedOut = 3

// Signing is r's secrets that sign a message at now: the one in force
// and those rotated out less than RotatedFor ago.
func (r OperatorReceiver) Signing(now time.Time) [][]byte {
	var out [][]byte
	for _, s := range r.Secrets {
		if s.Until.IsZero() || now.Before(s.Until) {
			out = append(out, s.Key)
		}
	}
	return out
}

// ReceiverView is what an operator sees of their receiver: never a
// secret, which is shown once, when it is made.
type ReceiverView struct {
	URL     string    `json:"url"`
	Created time.Time `json:"created"`
	// Rotating is when the last of the secrets rotated out stops
	// signing; zero when none does.
	Rotating time.Time `json:"rotating_until,omitzero"`
	// Secret is the new secret, in the answer that made it alone.
	Secret       string    `json:"secret,omitempty"`
	FailingSince time.Time `json:"failing_since,omitzero"`
	Disabled     time.Time `json:"disabled,omitzero"` // after failing for 5 days; POST /receiver/enable
}

// View is what r's operator sees of it at now.
func (r OperatorReceiver) View(now time.Time) ReceiverView {
	v := ReceiverView{URL: r.URL, Created: r.Created, FailingSince: r.FailingSince, Disabled: r.Disabled}
	for _, s := range r.Secrets {
		if !s.Until.IsZero() && now.Before(s.Until) && s.Until.After(v.Rotating) {
			v.Rotating = s.Until
		}
	}
	return v
}
