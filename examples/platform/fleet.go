package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// nodeStore is what the use cases need of a store to change or show one
// node: the node locked against every other change of it, or as last
// kept. Both stores implement it (the file store under its one lock,
// PostgreSQL in a transaction holding the node's row lock).
type nodeStore interface {
	// update runs fn on node id, locked, and keeps what fn changed when
	// it returns nil; when it returns an error, nothing of it is kept.
	// An unknown node is an error wrapping errUnknownNode. now is the
	// store's clock read once the node is locked, so that the changes
	// of one node are dated in the order they are made (a price history
	// refuses a change dated before the last).
	update(ctx context.Context, id string, fn func(n *node, now time.Time, tx nodeTx) error) error
	// read runs fn on node id as last kept, for showing it at now; with
	// history, n also holds its latest closures and n.noticeCount its
	// notices. fn must not change n.
	read(ctx context.Context, id string, history bool, fn func(n *node, now time.Time) error) error
	// routeNode is the node that holds live route id; an error wrapping
	// errUnknown when none does.
	routeNode(ctx context.Context, id string) (string, error)
}

// nodeTx is what a use case may ask of the store while update holds a
// node.
type nodeTx interface {
	// routeTaken reports whether a route id is held by a node already.
	routeTaken(id string) (bool, error)
}

// store is a whole store: the node use cases' nodeStore, and what each
// store still does its own way.
type store interface {
	nodeStore
	service
	// base is the store's rules: its configuration, log, clock and
	// notifier.
	base() *rules
}

func (c *rules) base() *rules { return c }

var (
	_ store = (*platform)(nil)
	_ store = (*pgPlatform)(nil)
)

// fleet is the platform's use cases, each written once over a store.
// Each reads the clock once, through its store (see nodeStore.update),
// and hands that time to the pure packages.
type fleet struct {
	*rules
	store store
}

func newFleet(st store) *fleet { return &fleet{rules: st.base(), store: st} }

// admit answers whether node id takes new connections now.
func (f *fleet) admit(ctx context.Context, id string) (admitAnswer, error) {
	if err := checkNodeID(id); err != nil {
		return admitAnswer{}, fmt.Errorf("admit: %w", err)
	}
	var a admitAnswer
	err := f.store.read(ctx, id, false, func(n *node, now time.Time) error {
		a = f.admitLocked(n, now)
		return nil
	})
	if err != nil {
		return admitAnswer{}, fmt.Errorf("admit %q: %w", id, err)
	}
	return a, nil
}

// open sets up a route if the node is admitted: the session locks the
// node's price.
func (f *fleet) open(ctx context.Context, req openRequest) (route, error) {
	if err := checkNodeID(req.Node); err != nil {
		return route{}, fmt.Errorf("open route: %w", err)
	}
	if req.User == "" || req.Key == "" {
		return route{}, fmt.Errorf("open route: user and key are required: %w", errBadInput)
	}
	if err := errors.Join(checkText("open route: user", req.User), checkText("open route: key", req.Key)); err != nil {
		return route{}, err
	}
	if req.Kind == 0 {
		req.Kind = routing.KindOwn
	}
	var opened route
	err := f.store.update(ctx, req.Node, func(n *node, now time.Time, tx nodeTx) error {
		if n.info.Role == 0 {
			return fmt.Errorf("open route through %q: %w", req.Node, errUnknownNode)
		}
		if a := f.admitLocked(n, now); !a.Admit {
			return admitError{answer: a}
		}
		s, err := n.prices.Lock(now)
		if err != nil {
			return fmt.Errorf("open route through %s: %w: %w", req.Node, errBadInput, err)
		}
		// Route IDs are global (traffic finds a route by ID alone): skip
		// any another route holds.
		id := ""
		for taken := true; taken; {
			n.nextRoute++
			id = fmt.Sprintf("%s-%d", req.Node, n.nextRoute)
			if taken, err = tx.routeTaken(id); err != nil {
				return err
			}
		}
		rt := &route{
			Route: routing.Route{
				ID: id, User: req.User, Key: req.Key,
				Node: req.Node, Country: n.info.Country, Price: s.Locked, Kind: req.Kind, Start: now,
			},
			Session: s,
		}
		n.routes[id] = rt
		n.info.LiveUsers = liveUsers(n)
		opened = *rt
		return nil
	})
	if err != nil {
		return route{}, err
	}
	f.log.Info("route opened", "node", req.Node, "route", opened.Route.ID, "user", req.User, "price", opened.Session.Locked)
	return opened, nil
}

// traffic charges a route's traffic at its session's price and marks
// it in use. A closed route is not found: it earns nothing more.
func (f *fleet) traffic(ctx context.Context, req trafficRequest) (route, error) {
	if err := checkText("traffic: route", req.Route); err != nil {
		return route{}, err
	}
	unknown := fmt.Errorf("traffic of route %q: %w (closed routes earn nothing more)", req.Route, errUnknown)
	nodeID, err := f.store.routeNode(ctx, req.Route)
	if err != nil {
		return route{}, fmt.Errorf("traffic of route %q: %w (closed routes earn nothing more)", req.Route, err)
	}
	var out route
	err = f.store.update(ctx, nodeID, func(n *node, now time.Time, _ nodeTx) error {
		rt := n.routes[req.Route]
		if rt == nil { // closed since
			return unknown
		}
		c, err := n.prices.Charge(rt.Session, []pricing.Usage{{At: now, Bytes: req.Bytes}})
		if err != nil {
			return fmt.Errorf("traffic of route %s: %w: %w", req.Route, errBadInput, err)
		}
		if rt.Earned, err = rt.Earned.Add(c); err != nil {
			return fmt.Errorf("traffic of route %s: %w: %w", req.Route, errBadInput, err)
		}
		rt.Route.LastTraffic = now
		rt.Route.Price = f.sessionPrice(n, rt, now)
		out = *rt
		return nil
	})
	return out, err
}

// setPrice records the node's new price from now on. Running sessions
// keep their lock: a rise never reaches them, a drop once it has stood for
// the window.
func (f *fleet) setPrice(ctx context.Context, req priceRequest) error {
	if err := checkNodeID(req.Node); err != nil {
		return fmt.Errorf("price: %w", err)
	}
	err := f.store.update(ctx, req.Node, func(n *node, now time.Time, _ nodeTx) error {
		if n.info.Role == 0 {
			return fmt.Errorf("price of %q: %w", req.Node, errUnknownNode)
		}
		if err := n.prices.Set(now, req.Price); err != nil {
			return fmt.Errorf("price of %s: %w: %w", req.Node, errBadInput, err)
		}
		n.info.Price = req.Price
		return nil
	})
	if err == nil {
		f.log.Info("price changed", "node", req.Node, "price", req.Price)
	}
	return err
}

// view shows node id, with its latest closures, and its newest
// deliveries when notices are delivered.
func (f *fleet) view(ctx context.Context, id string) (nodeView, error) {
	if err := checkNodeID(id); err != nil {
		return nodeView{}, err
	}
	var v nodeView
	err := f.store.read(ctx, id, true, func(n *node, now time.Time) error {
		v = f.viewLocked(n, now)
		return nil
	})
	if err != nil {
		return nodeView{}, err
	}
	if f.notify != nil && f.notify.box != nil {
		if v.Deliveries, err = nodeDeliveries(ctx, f.notify.box, v.ID); err != nil {
			return nodeView{}, err
		}
	}
	return v, nil
}

// notices returns the notices after after, at most limit, each with its
// delivery when notices are delivered.
func (f *fleet) notices(ctx context.Context, after int64, limit int) ([]numberedNotice, int64, error) {
	ns, last, err := f.store.notices(ctx, after, limit)
	if err == nil && f.notify != nil && f.notify.box != nil {
		err = addDeliveries(ctx, f.notify.box, ns)
	}
	return ns, last, err
}
