package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"time"
)

// operatorReceiver is an operator's own receiver of their nodes'
// notices, which the operator sets through the API: it takes the place
// of the notify file's line for each of the operator's nodes.
type operatorReceiver struct {
	URL string `json:"url"`
	// Secrets sign its messages, the newest first; a secret rotated out
	// signs them beside the new one until its Until.
	Secrets []operatorSecret `json:"secrets"`
	Created time.Time        `json:"created"`
	// FailingSince is the first failed attempt since the last delivered
	// one (zero: none failing); Disabled, when the receiver was disabled
	// for failing failFor (zero: enabled). A disabled receiver is sent
	// nothing until its operator enables it again.
	FailingSince time.Time `json:"failing_since,omitzero"`
	Disabled     time.Time `json:"disabled,omitzero"`
}

// failFor is how long a receiver fails every attempt before it is
// disabled.
const failFor = 5 * 24 * time.Hour

// operatorSecret is one of a receiver's secrets.
type operatorSecret struct {
	Key   []byte    `json:"key"`
	Until time.Time `json:"until,omitzero"` // zero: in force; else rotated out, signing until then
}

// rotatedFor is how long a secret rotated out still signs messages
// beside the new one, so a receiver has a day to take the new one.
const rotatedFor = 24 * time.Hour

// receiverStore keeps the operators' receivers; both stores implement
// it.
type receiverStore interface {
	// operatorReceivers is every operator's receiver, by operator.
	operatorReceivers(ctx context.Context) (map[string]operatorReceiver, error)
	// updateReceiver runs fn on operator's receiver (the zero value when
	// the operator has none), locked, and keeps what fn changed when it
	// returns nil. now is the store's clock, read once it is locked.
	updateReceiver(ctx context.Context, operator string, fn func(r *operatorReceiver, now time.Time) error) error
}

// newSecret is a Standard Webhooks secret: 32 random bytes.
func newSecret() ([]byte, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("receiver secret: %w", err)
	}
	return key, nil
}

// secretText is key as an operator sets it in their receiver:
// "whsec_" and base64.
func secretText(key []byte) string { return "whsec_" + base64.StdEncoding.EncodeToString(key) }

// checkReceiverURL checks an operator's receiver URL as the notify
// file's are checked.
func checkReceiverURL(raw string) (*url.URL, error) {
	if err := checkText("receiver: url", raw); err != nil {
		return nil, err
	}
	u, err := parseReceiverURL(raw)
	if err != nil {
		return nil, fmt.Errorf("receiver: %w: %w", err, errBadInput)
	}
	return u, nil
}

// signing is r's secrets that sign a message at now: the one in force
// and those rotated out less than rotatedFor ago.
func (r operatorReceiver) signing(now time.Time) [][]byte {
	var out [][]byte
	for _, s := range r.Secrets {
		if s.Until.IsZero() || now.Before(s.Until) {
			out = append(out, s.Key)
		}
	}
	return out
}

// withOperators is file's receivers (the notify file's) with the
// operators' own, which take the place of the file's for each of the
// operator's nodes (owners: each node's operator), as in force at now.
func withOperators(file *receivers, ops map[string]operatorReceiver, owners map[string]string, now time.Time) *receivers {
	rs := &receivers{byNode: map[string]*receiver{}}
	if file != nil {
		*rs = *file
	}
	rs.file = file
	rs.owners = maps.Clone(owners)
	rs.byOperator = map[string]*receiver{}
	for op, r := range ops {
		u, err := url.Parse(r.URL)
		keys := r.signing(now)
		if err != nil || len(keys) == 0 {
			continue
		}
		rs.byOperator[op] = &receiver{Operator: op, URL: u, Secrets: keys, failingSince: r.FailingSince, disabled: !r.Disabled.IsZero()}
	}
	return rs
}

// receiverView is what an operator sees of their receiver: never a
// secret, which is shown once, when it is made.
type receiverView struct {
	URL     string    `json:"url"`
	Created time.Time `json:"created"`
	// Rotating is when the secret rotated out last stops signing; zero
	// when none does.
	Rotating time.Time `json:"rotating_until,omitzero"`
	// Secret is the new secret, in the answer that made it alone.
	Secret       string    `json:"secret,omitempty"`
	FailingSince time.Time `json:"failing_since,omitzero"`
	Disabled     time.Time `json:"disabled,omitzero"` // after failing for 5 days; POST /receiver/enable
}

func (r operatorReceiver) view(now time.Time) receiverView {
	v := receiverView{URL: r.URL, Created: r.Created, FailingSince: r.FailingSince, Disabled: r.Disabled}
	for _, s := range r.Secrets {
		if !s.Until.IsZero() && now.Before(s.Until) {
			v.Rotating = s.Until
		}
	}
	return v
}

// receiverRequest sets an operator's receiver URL.
type receiverRequest struct {
	URL string `json:"url"`
}

// receiverOf is operator's receiver; errUnknown when they have none.
func (f *fleet) receiverOf(ctx context.Context, operator string) (receiverView, error) {
	ops, err := f.receivers.operatorReceivers(ctx)
	if err != nil {
		return receiverView{}, err
	}
	r, ok := ops[operator]
	if !ok {
		return receiverView{}, fmt.Errorf("receiver of operator %s: %w (set one with PUT /receiver)", operator, errUnknown)
	}
	return r.view(f.now()), nil
}

// setReceiver sets where operator's notices go. A receiver made now gets
// a secret, returned once (created true); a URL changed keeps the
// receiver's secrets, and starts its record of failing afresh (a
// disabled receiver moved is enabled).
func (f *fleet) setReceiver(ctx context.Context, operator string, req receiverRequest) (v receiverView, created bool, err error) {
	u, err := checkReceiverURL(req.URL)
	if err != nil {
		return receiverView{}, false, err
	}
	key, err := newSecret()
	if err != nil {
		return receiverView{}, false, err
	}
	err = f.receivers.updateReceiver(ctx, operator, func(r *operatorReceiver, now time.Time) error {
		created = len(r.Secrets) == 0
		if created {
			*r = operatorReceiver{Secrets: []operatorSecret{{Key: key}}, Created: now}
		}
		if r.URL != req.URL { // another receiver: its own record of failing
			r.FailingSince, r.Disabled = time.Time{}, time.Time{}
		}
		r.URL = req.URL
		v = r.view(now)
		return nil
	})
	if err != nil {
		return receiverView{}, false, err
	}
	if created {
		v.Secret = secretText(key)
	}
	f.log.Info("receiver set", "operator", operator, "host", u.Host, "new", created)
	return v, created, f.refreshReceivers(ctx)
}

// rotateReceiver gives operator's receiver a new secret, returned once;
// the one it replaces signs beside it for rotatedFor, and any older one
// no more.
func (f *fleet) rotateReceiver(ctx context.Context, operator string) (receiverView, error) {
	key, err := newSecret()
	if err != nil {
		return receiverView{}, err
	}
	var v receiverView
	err = f.receivers.updateReceiver(ctx, operator, func(r *operatorReceiver, now time.Time) error {
		if len(r.Secrets) == 0 {
			return fmt.Errorf("receiver of operator %s: %w (set one with PUT /receiver)", operator, errUnknown)
		}
		old := r.Secrets[0]
		old.Until = now.Add(rotatedFor)
		r.Secrets = []operatorSecret{{Key: key}, old}
		v = r.view(now)
		return nil
	})
	if err != nil {
		return receiverView{}, err
	}
	v.Secret = secretText(key)
	f.log.Info("receiver secret rotated", "operator", operator, "old_until", v.Rotating)
	return v, f.refreshReceivers(ctx)
}

// refreshReceivers puts the operators' receivers, as the store keeps
// them now, into the dispatch's receivers, beside the notify file's, for
// the nodes f.owners gives each operator: after a change here at once,
// and on the other replicas at their next plan round.
func (f *fleet) refreshReceivers(ctx context.Context) error {
	if f.dispatch == nil || f.receivers == nil {
		return nil
	}
	ops, err := f.receivers.operatorReceivers(ctx)
	if err != nil {
		return err
	}
	f.dispatch.setOperators(ops, f.owners, f.now())
	return nil
}

// round is a replica's periodic work: the operators' receivers put in
// force as the store keeps them (another replica's changes), then a plan
// round.
func (f *fleet) round(ctx context.Context) error {
	if err := f.refreshReceivers(ctx); err != nil {
		f.log.Warn("the operators' receivers not read", "err", err)
	}
	return f.planRound(ctx)
}

// typeTest is the type of a test message, sent on an operator's demand.
const typeTest = "receiver.test"

// testAnswer is what a test message did: its webhook-id, and whether
// the receiver took it (a 2xx), with its status or the error.
type testAnswer struct {
	ID        string `json:"id"`
	Delivered bool   `json:"delivered"`
	Status    int    `json:"status,omitempty"`
	Error     string `json:"error,omitempty"`
}

// testReceiver sends operator's receiver a test message now, signed as
// every message is (with both secrets during a rotation), and answers
// what it did. The message is not kept: it is the operator's to try
// their receiver with, not a notice.
func (f *fleet) testReceiver(ctx context.Context, operator string) (testAnswer, error) {
	var rc *receiver
	if f.dispatch != nil {
		rc = f.dispatch.receivers().byOperator[operator]
	}
	if rc == nil || f.notify == nil {
		return testAnswer{}, fmt.Errorf("receiver of operator %s: %w (set one with PUT /receiver)", operator, errUnknown)
	}
	now := f.now()
	body, err := json.Marshal(message{Type: typeTest, Timestamp: now.UTC(), Data: messageData{
		At: now.UTC(), Text: "a test message from the platform, sent when you asked for it",
	}})
	if err != nil {
		return testAnswer{}, err
	}
	id := "tst_" + operator + "_" + strconv.FormatInt(now.UnixMicro(), 10)
	res := f.notify.attempt(ctx, rc, delivery{ID: id, Body: body, Created: now})
	attrs := []any{"operator", operator, "host", rc.host()}
	if res.status != 0 {
		attrs = append(attrs, "status", res.status)
	}
	if res.err != "" {
		attrs = append(attrs, "err", res.err)
	}
	f.log.Info("receiver tested", attrs...)
	return testAnswer{ID: id, Delivered: res.outcome == outcomeDelivered, Status: res.status, Error: res.err}, nil
}

// enableReceiver enables operator's receiver again, after it was
// disabled for failing: it is sent their notices from now on.
func (f *fleet) enableReceiver(ctx context.Context, operator string) (receiverView, error) {
	var v receiverView
	err := f.receivers.updateReceiver(ctx, operator, func(r *operatorReceiver, now time.Time) error {
		if len(r.Secrets) == 0 {
			return fmt.Errorf("receiver of operator %s: %w (set one with PUT /receiver)", operator, errUnknown)
		}
		r.Disabled, r.FailingSince = time.Time{}, time.Time{}
		v = r.view(now)
		return nil
	})
	if err != nil {
		return receiverView{}, err
	}
	f.log.Info("receiver enabled", "operator", operator)
	return v, f.refreshReceivers(ctx)
}

// attempted records an attempt of a notice's delivery to an operator's
// receiver rc, at at: delivered (ok) ends its failing; a failure starts
// it, and one failFor after the first disables the receiver. The store
// is written only when that changes.
func (f *fleet) attempted(ctx context.Context, rc *receiver, ok bool, at time.Time) {
	if rc.Operator == "" || (ok && rc.failingSince.IsZero()) ||
		(!ok && !rc.failingSince.IsZero() && at.Sub(rc.failingSince) < failFor) {
		return
	}
	disabled := false
	err := f.receivers.updateReceiver(ctx, rc.Operator, func(r *operatorReceiver, _ time.Time) error {
		switch {
		case len(r.Secrets) == 0 || r.URL != rc.URL.String():
			return errUnknown // changed since: the attempt was to another receiver
		case ok:
			r.FailingSince = time.Time{}
		case r.FailingSince.IsZero():
			r.FailingSince = at
		case r.Disabled.IsZero() && at.Sub(r.FailingSince) >= failFor:
			r.Disabled, disabled = at, true
		}
		return nil
	})
	if errors.Is(err, errUnknown) {
		return
	}
	if err != nil {
		f.log.Warn("notify: the receiver's failing not recorded", "operator", rc.Operator, "err", err)
		return
	}
	if disabled {
		f.log.Warn("notify: receiver disabled after failing for 5 days; its operator enables it again", "operator", rc.Operator, "receiver", rc.host())
	}
	if err := f.refreshReceivers(ctx); err != nil {
		f.log.Warn("the operators' receivers not read", "err", err)
	}
}
