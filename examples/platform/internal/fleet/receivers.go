package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/notify"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// ReceiverRequest sets an operator's receiver URL.
type ReceiverRequest struct {
	URL string `json:"url"`
}

// ReceiverOf is operator's receiver; ErrUnknown when they have none. It
// reads that one receiver from the store, as it is now (another replica
// may have changed it): a dashboard page or GET /receiver costs one
// operator's row, whatever the number of operators.
func (f *Fleet) ReceiverOf(ctx context.Context, operator string) (store.ReceiverView, error) {
	r, ok, err := f.receivers.OperatorReceiver(ctx, operator)
	if err != nil {
		return store.ReceiverView{}, err
	}
	if !ok {
		return store.ReceiverView{}, fmt.Errorf("receiver of operator %s: %w (set one with PUT /receiver)", operator, store.ErrUnknown)
	}
	return r.View(f.Now()), nil
}

// SetReceiver sets where operator's notices go. A receiver made now gets
// a secret, returned once (created true); a URL changed keeps the
// receiver's secrets, and starts its record of failing afresh (a
// disabled receiver moved is enabled).
func (f *Fleet) SetReceiver(ctx context.Context, operator string, req ReceiverRequest) (v store.ReceiverView, created bool, err error) {
	u, err := notify.CheckReceiverURL(req.URL)
	if err != nil {
		return store.ReceiverView{}, false, err
	}
	key, err := notify.NewSecret()
	if err != nil {
		return store.ReceiverView{}, false, err
	}
	err = f.receivers.UpdateReceiver(ctx, operator, func(r *store.OperatorReceiver, now time.Time) error {
		created = len(r.Secrets) == 0
		if created {
			*r = store.OperatorReceiver{Secrets: []store.OperatorSecret{{Key: key}}, Created: now}
		}
		if r.URL != req.URL { // another receiver: its own record of failing
			r.FailingSince, r.Disabled = time.Time{}, time.Time{}
		}
		r.URL = req.URL
		v = r.View(now)
		return nil
	})
	if err != nil {
		return store.ReceiverView{}, false, err
	}
	if created {
		v.Secret = notify.SecretText(key)
	}
	f.Log.Info("receiver set", "operator", operator, "host", u.Host, "new", created)
	return v, created, f.RefreshReceivers(ctx)
}

// RotateReceiver gives operator's receiver a new secret, returned once;
// the one it replaces signs beside it for RotatedFor, and one rotated
// out before still signs until its own day is over (the newest
// MaxRotatedOut of them): a second rotation within the day, a double
// click, must not take the secret the receiver still checks with.
func (f *Fleet) RotateReceiver(ctx context.Context, operator string) (store.ReceiverView, error) {
	key, err := notify.NewSecret()
	if err != nil {
		return store.ReceiverView{}, err
	}
	var v store.ReceiverView
	err = f.receivers.UpdateReceiver(ctx, operator, func(r *store.OperatorReceiver, now time.Time) error {
		if len(r.Secrets) == 0 {
			return fmt.Errorf("receiver of operator %s: %w (set one with PUT /receiver)", operator, store.ErrUnknown)
		}
		old := r.Secrets[0]
		old.Until = now.Add(store.RotatedFor)
		keep := []store.OperatorSecret{{Key: key}, old}
		for _, s := range r.Secrets[1:] {
			if len(keep) > store.MaxRotatedOut {
				break
			}
			if !s.Until.IsZero() && now.Before(s.Until) {
				keep = append(keep, s)
			}
		}
		r.Secrets = keep
		v = r.View(now)
		return nil
	})
	if err != nil {
		return store.ReceiverView{}, err
	}
	v.Secret = notify.SecretText(key)
	f.Log.Info("receiver secret rotated", "operator", operator, "old_until", v.Rotating)
	return v, f.RefreshReceivers(ctx)
}

// RefreshReceivers puts the operators' receivers, as the store keeps
// them now, into the dispatch's receivers, beside the notify file's, for
// the nodes each operator has (SetOwners): after a change here at once,
// and on the other replicas at their next plan round.
func (f *Fleet) RefreshReceivers(ctx context.Context) error {
	if f.Dispatch == nil || f.receivers == nil {
		return nil
	}
	ops, err := f.receivers.OperatorReceivers(ctx)
	if err != nil {
		return err
	}
	f.Dispatch.SetOperators(ops, f.OwnersNow(), f.Now())
	return nil
}

// Round is a replica's periodic work: the operators' receivers put in
// force as the store keeps them (another replica's changes), then a plan
// round.
func (f *Fleet) Round(ctx context.Context) error {
	if err := f.RefreshReceivers(ctx); err != nil {
		f.Log.Warn("the operators' receivers not read", "err", err)
	}
	return f.PlanRound(ctx)
}

// TypeTest is the type of a test message, sent on an operator's demand.
const TypeTest = "receiver.test"

// TestAnswer is what a test message did: its webhook-id, and whether
// the receiver took it (a 2xx), with its status or the error.
type TestAnswer struct {
	ID        string `json:"id"`
	Delivered bool   `json:"delivered"`
	Status    int    `json:"status,omitempty"`
	Error     string `json:"error,omitempty"`
}

// TestReceiver sends operator's receiver a test message now, signed as
// every message is (with both secrets during a rotation), and answers
// what it did. The message is not kept: it is the operator's to try
// their receiver with, not a notice.
func (f *Fleet) TestReceiver(ctx context.Context, operator string) (TestAnswer, error) {
	var rc *notify.Receiver
	if f.Dispatch != nil {
		rc = f.Dispatch.Receivers().ForOperator(operator)
	}
	if rc == nil || f.Notify == nil {
		return TestAnswer{}, fmt.Errorf("receiver of operator %s: %w (set one with PUT /receiver)", operator, store.ErrUnknown)
	}
	now := f.Now()
	body, err := json.Marshal(notify.Message{Type: TypeTest, Timestamp: now.UTC(), Data: notify.MessageData{
		At: now.UTC(), Text: "a test message from the platform, sent when you asked for it",
	}})
	if err != nil {
		return TestAnswer{}, err
	}
	id := "tst_" + operator + "_" + strconv.FormatInt(now.UnixMicro(), 10)
	res := f.Notify.Attempt(ctx, rc, store.Delivery{ID: id, Body: body, Created: now})
	attrs := []any{"operator", operator, "host", rc.Host()}
	if res.Status != 0 {
		attrs = append(attrs, "status", res.Status)
	}
	if res.Err != "" {
		attrs = append(attrs, "err", res.Err)
	}
	f.Log.Info("receiver tested", attrs...)
	return TestAnswer{ID: id, Delivered: res.Outcome == store.OutcomeDelivered, Status: res.Status, Error: res.Err}, nil
}

// EnableReceiver enables operator's receiver again, after it was
// disabled for failing: it is sent their notices from now on.
func (f *Fleet) EnableReceiver(ctx context.Context, operator string) (store.ReceiverView, error) {
	var v store.ReceiverView
	err := f.receivers.UpdateReceiver(ctx, operator, func(r *store.OperatorReceiver, now time.Time) error {
		if len(r.Secrets) == 0 {
			return fmt.Errorf("receiver of operator %s: %w (set one with PUT /receiver)", operator, store.ErrUnknown)
		}
		r.Disabled, r.FailingSince = time.Time{}, time.Time{}
		v = r.View(now)
		return nil
	})
	if err != nil {
		return store.ReceiverView{}, err
	}
	f.Log.Info("receiver enabled", "operator", operator)
	return v, f.RefreshReceivers(ctx)
}

// attempted records an attempt of a notice's delivery to an operator's
// receiver rc, at at: delivered (ok) ends its failing; a failure starts
// it, and one FailFor after the first disables the receiver. The store
// is written only when that changes.
func (f *Fleet) attempted(ctx context.Context, rc *notify.Receiver, ok bool, at time.Time) {
	if rc.Operator == "" || (ok && rc.FailingSince.IsZero()) ||
		(!ok && !rc.FailingSince.IsZero() && at.Sub(rc.FailingSince) < store.FailFor) {
		return
	}
	disabled := false
	err := f.receivers.UpdateReceiver(ctx, rc.Operator, func(r *store.OperatorReceiver, _ time.Time) error {
		switch {
		case len(r.Secrets) == 0 || r.URL != rc.URL.String():
			return store.ErrUnknown // changed since: the attempt was to another receiver
		case ok:
			r.FailingSince = time.Time{}
		case r.FailingSince.IsZero():
			r.FailingSince = at
		case r.Disabled.IsZero() && at.Sub(r.FailingSince) >= store.FailFor:
			r.Disabled, disabled = at, true
		}
		return nil
	})
	if errors.Is(err, store.ErrUnknown) {
		return
	}
	if err != nil {
		f.Log.Warn("notify: the receiver's failing not recorded", "operator", rc.Operator, "err", err)
		return
	}
	if disabled {
		f.Log.Warn("notify: receiver disabled after failing for 5 days; its operator enables it again", "operator", rc.Operator, "receiver", rc.Host())
	}
	if err := f.RefreshReceivers(ctx); err != nil {
		f.Log.Warn("the operators' receivers not read", "err", err)
	}
}
