package store

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// Config is the platform's rules and edges as main hands them to a
// store: zero fields are the defaults each names.
type Config struct {
	// StateDir holds the file store's files, one JSON file per node.
	// Required by the file store.
	StateDir string
	// Policy and Limits are the routing and overload rules; zero fields
	// are the packages' defaults (the help page's figures).
	Policy routing.Policy
	Limits overload.Limits
	// Prices configures each node's price history (zero: 3-hour window).
	Prices pricing.Config
	// Logger receives every decision; nil discards.
	Logger *slog.Logger
	// Now is the clock at the edges; nil means time.Now. The pure packages
	// get the times it returns as arguments.
	Now func() time.Time
	// Dispatch makes the deliveries of the notices a store decides (the
	// notifier's dispatch): with it, a store keeps an outbox of them
	// (Store.Outbox), which a notifier delivers; nil: none are written.
	Dispatch Deliveries
}

// Rules is what every store and the use cases share: the configuration
// with its defaults filled in, and the steps of a node that belong to no
// one store (a new node, a quiet plan, a route's price), each run with
// the node locked by the store.
type Rules struct {
	Config   Config
	Log      *slog.Logger     // Config.Logger, or one that discards
	Now      func() time.Time // Config.Now, or the wall clock
	Dispatch Deliveries       // Config.Dispatch
}

// NewRules checks cfg's policy, limits and prices, and fills in the
// defaults of its logger and clock.
func NewRules(cfg Config) (Rules, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return Rules{}, fmt.Errorf("policy: %w", err)
	}
	if err := cfg.Limits.Validate(); err != nil {
		return Rules{}, fmt.Errorf("limits: %w", err)
	}
	if _, err := pricing.NewHistory(cfg.Prices); err != nil {
		return Rules{}, fmt.Errorf("prices: %w", err)
	}
	c := Rules{Config: cfg, Log: cfg.Logger, Now: cfg.Now, Dispatch: cfg.Dispatch}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		// The wall clock alone: every time the platform keeps is compared
		// with stored and reported wall times anyway, and an error that
		// prints one (a price change's) shows no "m=+…" reading.
		c.Now = func() time.Time { return time.Now().Round(0) }
	}
	return c, nil
}

// NewNode is node id as first heard of: unregistered, with a fresh
// tracker and price history.
func (p *Rules) NewNode(id string) (*Node, error) {
	h, err := pricing.NewHistory(p.Config.Prices)
	if err != nil {
		return nil, err
	}
	return &Node{
		Info:    routing.Node{ID: id},
		Tracker: overload.NewTracker(id, p.Config.Limits),
		Prices:  h,
		Routes:  map[string]*Route{},
	}, nil
}

// Quiet reports whether a plan of n at now can change nothing but n's
// budgets' dates: n is registered, neither overloaded nor paused (so
// routing closes none of its routes, used or not), and no price change
// may have reached its sessions since its last plan (which priced its
// routes as they are stored). Such a plan needs none of n's routes.
func (c *Rules) Quiet(n *Node, now time.Time) bool {
	if n.Info.Role == 0 {
		return true // never planned
	}
	if n.Info.Paused || n.Info.Overloaded() {
		return false
	}
	last := n.Info.State.PlannedAt
	if last.IsZero() || now.Before(last) {
		return false
	}
	if k := n.Prices.Len(); k > 0 {
		c := n.Prices.Changes()[k-1]
		if !c.At.Add(n.Prices.Window()).Before(last) {
			return false
		}
	}
	return true
}

// LogClosure logs a route a plan of node closed, once the closure is
// the store's.
func (c *Rules) LogClosure(node string, a routing.Action) {
	c.Log.Warn("closing route", "node", node, "route", a.Route.ID, "user", a.Route.User,
		"reason", string(a.Reason), "action", a.String())
}

// AppendPricedRoutes appends n's routes in ID order, each at its session's
// price at now. The price is stored back in the route, so the node's file
// shows the one the last plan saw.
func (p *Rules) AppendPricedRoutes(dst []routing.Route, n *Node, now time.Time) []routing.Route {
	for _, rid := range slices.Sorted(maps.Keys(n.Routes)) {
		rt := n.Routes[rid]
		rt.Route.Price = p.SessionPrice(n, rt, now)
		r := rt.Route
		if rt.ReliedOn.After(r.LastTraffic) {
			r.LastTraffic = rt.ReliedOn
		}
		dst = append(dst, r)
	}
	return dst
}

// SessionPrice is what the route's user pays now; the locked price when
// the history cannot say (it always can for sessions it locked).
func (p *Rules) SessionPrice(n *Node, rt *Route, now time.Time) pricing.Price {
	if now.Before(rt.Session.Start) {
		return rt.Session.Locked
	}
	pr, err := n.Prices.SessionPrice(rt.Session, now)
	if err != nil {
		p.Log.Error("session price", "node", n.Info.ID, "route", rt.Route.ID, "err", err)
		return rt.Session.Locked
	}
	return pr
}

// Deliveries makes the outbox's deliveries of what a change decided, to
// the receivers in force: a store writes them in the same change as the
// notice. The notifier's dispatch implements it.
type Deliveries interface {
	// NoticeDelivery is the delivery of notice n, decided at at as the
	// node's seq-th reading.
	NoticeDelivery(n overload.Notice, seq int64, at time.Time) (Delivery, error)
	// EndDelivery is the delivery of the end e of node's overload;
	// false when ends of overloads are not sent.
	EndDelivery(node string, seq int64, e overload.Event, at time.Time) (Delivery, bool, error)
}

// NoticeDelivery is the outbox's delivery of n's notice, dated when its
// overload started by the platform's clock (now for a node that does not
// say); false without a notice or a dispatch.
func (r Rules) NoticeDelivery(n *Node, now time.Time) (Delivery, bool, error) {
	if r.Dispatch == nil || n.Notice == nil {
		return Delivery{}, false, nil
	}
	d, err := r.Dispatch.NoticeDelivery(*n.Notice, n.Readings, cmp.Or(n.StartedAt, now))
	return d, err == nil, err
}

// EndDelivery is the outbox's delivery of the end of n's overload, when
// its change ended one whose start had a notice and the dispatch sends
// ends, dated when it ended by the platform's clock (now for a node that
// does not say); false otherwise. An overload that started within the
// hour of the node's last notice had none, and its end alone would reach
// the receiver without the node.overloaded it follows.
func (r Rules) EndDelivery(n *Node, now time.Time) (Delivery, bool, error) {
	e := n.Event
	if r.Dispatch == nil || e == nil || e.Kind != overload.End {
		return Delivery{}, false, nil
	}
	if n.Tracker != nil && !n.Tracker.LastNotice().Equal(e.At.Add(-e.Lasted)) {
		return Delivery{}, false, nil
	}
	d, ok, err := r.Dispatch.EndDelivery(n.Info.ID, n.Readings, *e, cmp.Or(n.Info.OverloadEnded, now))
	return d, ok && err == nil, err
}

// RequestTimeout bounds the work of one API request, every store call in
// it included; a store sets its own bounds beside it (the PostgreSQL
// store's statement timeout outlasts it, its batches take half of it).
const RequestTimeout = 10 * time.Second
