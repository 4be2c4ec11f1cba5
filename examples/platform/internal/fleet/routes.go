package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// Admit answers whether node id takes new connections now.
func (f *Fleet) Admit(ctx context.Context, id string) (AdmitAnswer, error) {
	if err := store.CheckNodeID(id); err != nil {
		return AdmitAnswer{}, fmt.Errorf("admit: %w", err)
	}
	var a AdmitAnswer
	err := f.Store.Read(ctx, id, false, func(n *store.Node, now time.Time) error {
		a = f.admitLocked(n, now)
		return nil
	})
	if err != nil {
		return AdmitAnswer{}, fmt.Errorf("admit %q: %w", id, err)
	}
	return a, nil
}

// Open sets up a route if the node is admitted: the session locks the
// node's price.
func (f *Fleet) Open(ctx context.Context, req OpenRequest) (store.Route, error) {
	if err := store.CheckNodeID(req.Node); err != nil {
		return store.Route{}, fmt.Errorf("open route: %w", err)
	}
	if req.User == "" || req.Key == "" {
		return store.Route{}, fmt.Errorf("open route: user and key are required: %w", store.ErrBadInput)
	}
	if err := errors.Join(store.CheckText("open route: user", req.User), store.CheckText("open route: key", req.Key)); err != nil {
		return store.Route{}, err
	}
	if req.Kind == 0 {
		req.Kind = routing.KindOwn
	}
	var opened store.Route
	err := f.Store.Update(ctx, req.Node, func(n *store.Node, now time.Time, tx store.NodeTx) error {
		if n.Info.Role == 0 {
			return fmt.Errorf("open route through %q: %w", req.Node, store.ErrNotRegistered)
		}
		if a := f.admitLocked(n, now); !a.Admit {
			return AdmitError{Answer: a}
		}
		start := openTime(n, now)
		s, err := n.Prices.Lock(start)
		if err != nil {
			return fmt.Errorf("open route through %s: %w: %w", req.Node, store.ErrBadInput, err)
		}
		// Route IDs are global (traffic finds a route by ID alone): skip
		// any another route holds.
		id := ""
		for taken := true; taken; {
			n.NextRoute++
			id = fmt.Sprintf("%s-%d", req.Node, n.NextRoute)
			if taken, err = tx.RouteTaken(id); err != nil {
				return err
			}
		}
		rt := &store.Route{
			Route: routing.Route{
				ID: id, User: req.User, Key: req.Key,
				Node: req.Node, Country: n.Info.Country, Price: s.Locked, Kind: req.Kind, Start: start,
			},
			Session: s,
		}
		n.Routes[id] = rt
		n.Info.LiveUsers = store.LiveUsers(n)
		opened = *rt
		return nil
	})
	if err != nil {
		return store.Route{}, err
	}
	f.Log.Info("route opened", "node", req.Node, "route", opened.Route.ID, "user", req.User, "price", opened.Session.Locked)
	return opened, nil
}

// Traffic charges a route's traffic at its session's price and marks
// it in use. A closed route is not found: it earns nothing more.
func (f *Fleet) Traffic(ctx context.Context, req TrafficRequest) (store.Route, error) {
	if err := store.CheckText("traffic: route", req.Route); err != nil {
		return store.Route{}, err
	}
	unknown := fmt.Errorf("traffic of route %q: %w (closed routes earn nothing more)", req.Route, store.ErrUnknown)
	nodeID, err := f.Store.RouteNode(ctx, req.Route)
	if err != nil {
		return store.Route{}, fmt.Errorf("traffic of route %q: %w (closed routes earn nothing more)", req.Route, err)
	}
	var out store.Route
	err = f.Store.Update(ctx, nodeID, func(n *store.Node, now time.Time, _ store.NodeTx) error {
		rt := n.Routes[req.Route]
		if rt == nil { // closed since
			return unknown
		}
		now = trafficTime(rt, now)
		c, err := n.Prices.Charge(rt.Session, []pricing.Usage{{At: now, Bytes: req.Bytes}})
		if err != nil {
			return fmt.Errorf("traffic of route %s: %w: %w", req.Route, store.ErrBadInput, err)
		}
		if rt.Earned, err = rt.Earned.Add(c); err != nil {
			return fmt.Errorf("traffic of route %s: %w: %w", req.Route, store.ErrBadInput, err)
		}
		rt.Route.LastTraffic = now
		rt.Route.Price = f.SessionPrice(n, rt, now)
		out = *rt
		return nil
	})
	return out, err
}

// SetPrice records the node's new price from now on. Running sessions
// keep their lock: a rise never reaches them, a drop once it has stood for
// the window.
func (f *Fleet) SetPrice(ctx context.Context, req PriceRequest) error {
	if err := store.CheckNodeID(req.Node); err != nil {
		return fmt.Errorf("price: %w", err)
	}
	err := f.Store.Update(ctx, req.Node, func(n *store.Node, now time.Time, _ store.NodeTx) error {
		if n.Info.Role == 0 {
			return fmt.Errorf("price of %q: %w: it takes a price once the route table holds it", req.Node, store.ErrNotRegistered)
		}
		if err := n.Prices.Set(priceChangeTime(n, now), req.Price); err != nil {
			return fmt.Errorf("price of %s: %w: %w", req.Node, store.ErrBadInput, err)
		}
		n.Info.Price = req.Price
		return nil
	})
	if err == nil {
		f.Log.Info("price changed", "node", req.Node, "price", req.Price)
	}
	return err
}

// MaxUsersRequest sets a node's max_users.
type MaxUsersRequest struct {
	Node     string `json:"node"`
	MaxUsers int    `json:"max_users"`
}

// Required names the fields its JSON must hold: a cap left out is not
// "no cap".
func (MaxUsersRequest) Required() []string { return []string{"node", "max_users"} }

// SetMaxUsers sets the node's cap of live users (0: none): a node whose
// cap is filled takes nobody new, which is not an overload.
func (f *Fleet) SetMaxUsers(ctx context.Context, req MaxUsersRequest) error {
	if err := store.CheckNodeID(req.Node); err != nil {
		return fmt.Errorf("max_users: %w", err)
	}
	if req.MaxUsers < 0 {
		return fmt.Errorf("max_users of %s: %d: want 0 (no cap) or more: %w", req.Node, req.MaxUsers, store.ErrBadInput)
	}
	err := f.Store.Update(ctx, req.Node, func(n *store.Node, _ time.Time, _ store.NodeTx) error {
		if n.Info.Role == 0 {
			return fmt.Errorf("max_users of %q: %w: it takes a cap once the route table holds it", req.Node, store.ErrNotRegistered)
		}
		n.Info.MaxUsers = req.MaxUsers
		return nil
	})
	if err == nil {
		f.Log.Info("max_users changed", "node", req.Node, "max_users", req.MaxUsers)
	}
	return err
}

// Pause pauses routing to node id (paused), or approves it again: from
// the next admission and plan on, routing's paused rules hold (nobody
// new; every route unused for two hours closed; above the move
// threshold, routes in use moved). Each change goes into the node's
// event list ("paused", "approved"); pausing a paused node, or approving
// one not paused, changes nothing.
func (f *Fleet) Pause(ctx context.Context, id string, paused bool) error {
	if err := store.CheckNodeID(id); err != nil {
		return err
	}
	changed := false
	err := f.Store.Update(ctx, id, func(n *store.Node, now time.Time, _ store.NodeTx) error {
		if n.Info.Role == 0 {
			return fmt.Errorf("node %q: %w: nothing is routed to it to pause", id, store.ErrNotRegistered)
		}
		if changed = n.Info.Paused != paused; !changed {
			return nil
		}
		n.Info.Paused = paused
		ev := overload.Event{Kind: store.EventApproved, At: markTime(n, now)}
		if paused {
			ev.Kind = store.EventPaused
		}
		n.EventsSeen++
		n.Marks = store.AppendBounded(n.Marks, store.NumberedEvent{ID: n.EventsSeen, Event: ev}, store.MaxMarks)
		n.Event = &ev
		return nil
	})
	switch {
	case err != nil || !changed:
	case paused:
		f.Log.Warn("routing paused", "node", id)
	default:
		f.Log.Info("node approved: routing resumed", "node", id)
	}
	return err
}

func (p *Fleet) admitLocked(n *store.Node, now time.Time) AdmitAnswer {
	ok, why, err := p.Config.Policy.Admit(n.Info, now)
	a := AdmitAnswer{Node: n.Info.ID, Admit: ok, Reason: string(why), At: now}
	if err != nil {
		a.Why = err.Error()
		return a
	}
	if why != "" {
		a.Why = why.String()
	}
	if why == routing.ReasonCoolDown {
		a.Until = p.Config.Policy.OfferedAgain(n.Info.OverloadEnded)
	}
	return a
}

// OpenRequest asks for a new route through a node.
type OpenRequest struct {
	Node string       `json:"node"`
	User string       `json:"user"`
	Key  string       `json:"key"`
	Kind routing.Kind `json:"kind,omitempty"` // default own
}

// AdmitError says why a node took nobody new.
type AdmitError struct{ Answer AdmitAnswer }

// Error says which node took nobody new, and why.
func (e AdmitError) Error() string {
	return fmt.Sprintf("node %s takes nobody new: %v", e.Answer.Node, e.Answer.Why)
}

// Unwrap is store.ErrNotAdmit.
func (e AdmitError) Unwrap() error { return store.ErrNotAdmit }

// TrafficRequest records traffic a route carried.
type TrafficRequest struct {
	Route string `json:"route"`
	Bytes uint64 `json:"bytes"`
}

// Required names the fields its JSON must hold: bytes left out are not
// traffic that marks the route in use.
func (TrafficRequest) Required() []string { return []string{"route", "bytes"} }

// PriceRequest changes a node's asking price.
type PriceRequest struct {
	Node  string        `json:"node"`
	Price pricing.Price `json:"price"`
}

// Required names the fields its JSON must hold: a price left out is not
// a price of 0.
func (PriceRequest) Required() []string { return []string{"node", "price"} }

// AdmitAnswer is /admit's body.
type AdmitAnswer struct {
	Node   string `json:"node"`
	Admit  bool   `json:"admit"`
	Reason string `json:"reason,omitempty"` // paused, overloaded, cool-down, full
	Why    string `json:"why,omitempty"`    // the reason in words
	// At is the instant the answer holds for; Until, during a cool-down,
	// when the node is offered again (unless something else intervenes).
	At    time.Time `json:"at"`
	Until time.Time `json:"until,omitzero"`
}
