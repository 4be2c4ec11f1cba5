package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

var (
	_ store.Store = (*platform)(nil)
	_ store.Store = (*pgPlatform)(nil)
)

// fleet is the platform's use cases, each written once over a store.
// Each reads the clock once, through its store (see NodeStore.Update),
// and hands that time to the pure packages.
type fleet struct {
	*store.Rules
	store store.Store
	// Dispatch is the receivers in force and the notifier's wake-up:
	// the store's Deliveries as main makes them (nil: none).
	dispatch *dispatch
	// notify is the notifier delivering the store's outbox; nil: notices
	// are not delivered.
	notify *notifier
	// receivers keeps the operators' own receivers: the store.
	receivers store.ReceiverStore
	// owners is each node's operator as the route table names it (and,
	// once wired, the token file too: ownersWith).
	owners map[string]string
}

// newFleet is the use cases over st, whose deliveries n delivers (nil:
// none).
func newFleet(st store.Store, n *notifier) *fleet {
	f := &fleet{Rules: st.Base(), store: st, receivers: st, notify: n}
	f.dispatch, _ = f.Config.Dispatch.(*dispatch)
	if n != nil {
		n.attempted = f.attempted
	}
	return f
}

// Report takes reading r of the node it names and plans the node: a
// reading the node's tracker already counted returns ErrDuplicate and
// an older one ErrStale, with the node's name and state; both change
// nothing. The outcome is logged, and the notifier woken for what it
// sent, once the store has kept it: only for a node with a receiver (a
// wake costs the PostgreSQL store a claim, a statement and a commit,
// which for an undeliverable notice finds nothing).
func (f *fleet) Report(ctx context.Context, r overload.Reading) (reportOutcome, error) {
	if err := store.CheckNodeID(r.Node); err != nil {
		return reportOutcome{}, fmt.Errorf("report: %w", err)
	}
	// One value the store's take and plan share, allocated once a
	// report. The store may take the reading and plan the node more than
	// once (on its copy, then on its row; a transaction run again): each
	// take starts the run afresh, and the plan's error is logged once,
	// that of the run the store kept.
	run := &struct {
		out     reportOutcome
		at      time.Time
		first   bool // the first reading counted of a node the route table does not hold
		planErr error
	}{out: reportOutcome{Node: r.Node}}
	notice, err := f.store.Report(ctx, r.Node, func(n *store.Node, now time.Time) error {
		run.first = n.Info.Role == 0 && n.Readings == 0
		run.planErr = nil
		var err error
		run.out, err = f.take(n, r, now)
		n.Event, n.Notice, run.at = run.out.Event, run.out.Notice, now
		return err
	}, func(n *store.Node, now time.Time, tx store.NodeTx) (err error) {
		run.planErr, err = f.plan(n, now, tx)
		return err
	})
	out, at, first, planErr := run.out, run.at, run.first, run.planErr
	switch {
	case errors.Is(err, store.ErrDuplicate) || errors.Is(err, store.ErrStale):
		return out, err
	case err != nil:
		return reportOutcome{}, err
	}
	out.Notice = notice
	if planErr != nil {
		f.Log.Error("plan round", "node", r.Node, "err", planErr)
	}
	if first {
		f.Log.Warn("reports from a node the route table does not hold: tracked, not admitted until it is, never planned",
			"node", r.Node)
	}
	f.logOutcome(r, out, at)
	if f.dispatch != nil && (out.Notice != nil || (out.Event != nil && out.Event.Kind == overload.End && f.dispatch.ended)) &&
		f.dispatch.receivers().forNode(r.Node) != nil {
		f.dispatch.poke()
	}
	return out, nil
}

// planNode plans node n at now and carries the plan out in n (plan),
// for the store to write; a plan that fails is logged, and leaves n as
// it was.
func (f *fleet) planNode(n *store.Node, now time.Time, tx store.NodeTx) error {
	planErr, err := f.plan(n, now, tx)
	if planErr != nil {
		f.Log.Error("plan round", "node", n.Info.ID, "err", planErr)
	}
	return err
}

// plan plans node n at now and carries the plan out in n (planOne):
// planErr is the plan's own failure, which changes nothing; err the
// store's (tx), which fails the node's write. A node whose plan can
// change nothing but its budgets' dates (quiet) is planned without its
// routes, which the PostgreSQL store then need not read.
func (f *fleet) plan(n *store.Node, now time.Time, tx store.NodeTx) (planErr, err error) {
	if n.Info.Role == 0 {
		return nil, nil
	}
	var alts routing.Alternatives
	if !f.Quiet(n, now) {
		if alts, err = tx.Alternatives(n, now); err != nil {
			return nil, err
		}
	}
	_, planErr = f.planOne(now, n, alts)
	if err := tx.Failed(); err != nil {
		return nil, err
	}
	return planErr, nil
}

// planRound plans every node whose plan is due.
func (f *fleet) planRound(ctx context.Context) error { return f.store.PlanDue(ctx, f.planNode) }

// admit answers whether node id takes new connections now.
func (f *fleet) admit(ctx context.Context, id string) (admitAnswer, error) {
	if err := store.CheckNodeID(id); err != nil {
		return admitAnswer{}, fmt.Errorf("admit: %w", err)
	}
	var a admitAnswer
	err := f.store.Read(ctx, id, false, func(n *store.Node, now time.Time) error {
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
func (f *fleet) open(ctx context.Context, req openRequest) (store.Route, error) {
	if err := store.CheckNodeID(req.Node); err != nil {
		return store.Route{}, fmt.Errorf("open route: %w", err)
	}
	if req.User == "" || req.Key == "" {
		return store.Route{}, fmt.Errorf("open route: user and key are required: %w", store.ErrBadInput)
	}
	if err := errors.Join(checkText("open route: user", req.User), checkText("open route: key", req.Key)); err != nil {
		return store.Route{}, err
	}
	if req.Kind == 0 {
		req.Kind = routing.KindOwn
	}
	var opened store.Route
	err := f.store.Update(ctx, req.Node, func(n *store.Node, now time.Time, tx store.NodeTx) error {
		if n.Info.Role == 0 {
			return fmt.Errorf("open route through %q: %w", req.Node, store.ErrUnknownNode)
		}
		if a := f.admitLocked(n, now); !a.Admit {
			return admitError{answer: a}
		}
		s, err := n.Prices.Lock(now)
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
				Node: req.Node, Country: n.Info.Country, Price: s.Locked, Kind: req.Kind, Start: now,
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

// traffic charges a route's traffic at its session's price and marks
// it in use. A closed route is not found: it earns nothing more.
func (f *fleet) traffic(ctx context.Context, req trafficRequest) (store.Route, error) {
	if err := checkText("traffic: route", req.Route); err != nil {
		return store.Route{}, err
	}
	unknown := fmt.Errorf("traffic of route %q: %w (closed routes earn nothing more)", req.Route, store.ErrUnknown)
	nodeID, err := f.store.RouteNode(ctx, req.Route)
	if err != nil {
		return store.Route{}, fmt.Errorf("traffic of route %q: %w (closed routes earn nothing more)", req.Route, err)
	}
	var out store.Route
	err = f.store.Update(ctx, nodeID, func(n *store.Node, now time.Time, _ store.NodeTx) error {
		rt := n.Routes[req.Route]
		if rt == nil { // closed since
			return unknown
		}
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

// setPrice records the node's new price from now on. Running sessions
// keep their lock: a rise never reaches them, a drop once it has stood for
// the window.
func (f *fleet) setPrice(ctx context.Context, req priceRequest) error {
	if err := store.CheckNodeID(req.Node); err != nil {
		return fmt.Errorf("price: %w", err)
	}
	err := f.store.Update(ctx, req.Node, func(n *store.Node, now time.Time, _ store.NodeTx) error {
		if n.Info.Role == 0 {
			return fmt.Errorf("price of %q: %w", req.Node, store.ErrUnknownNode)
		}
		if err := n.Prices.Set(now, req.Price); err != nil {
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

// View shows node id, with its latest closures, and its newest
// deliveries when notices are delivered.
func (f *fleet) View(ctx context.Context, id string) (nodeView, error) {
	if err := store.CheckNodeID(id); err != nil {
		return nodeView{}, err
	}
	var v nodeView
	err := f.store.Read(ctx, id, true, func(n *store.Node, now time.Time) error {
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

// views shows the nodes whose ids sort after after, at most limit of
// them (0: all), by id, and returns the last one's id. A node that cannot
// be shown (its stored state does not read, or does not marshal) is
// listed with its error alone: one node's bad state never takes the
// fleet's view down.
func (f *fleet) views(ctx context.Context, after string, limit int) ([]json.RawMessage, string, error) {
	out := []json.RawMessage{}
	last, err := f.store.EachNode(ctx, after, limit, func(id string, n *store.Node, now time.Time, err error) {
		if err != nil {
			b, _ := json.Marshal(map[string]string{"id": id, "error": err.Error()})
			out = append(out, b)
			return
		}
		out = append(out, marshalView(id, f.viewLocked(n, now)))
	})
	if err != nil {
		return nil, "", err
	}
	return out, last, nil
}

// Events pages through node id's events, oldest first.
func (f *fleet) Events(ctx context.Context, id string, after int64, limit int) (store.EventPage, error) {
	return f.store.Events(ctx, id, after, limit)
}

// Plans pages through each node's latest plan that closed something.
func (f *fleet) Plans(ctx context.Context, after string, limit int) ([]routing.Plan, string, error) {
	return f.store.Plans(ctx, after, limit)
}

// Notices returns the notices after after, at most limit, each with its
// delivery when notices are delivered.
func (f *fleet) Notices(ctx context.Context, after int64, limit int) ([]store.NumberedNotice, int64, error) {
	ns, last, err := f.store.Notices(ctx, after, limit)
	if err == nil && f.notify != nil && f.notify.box != nil {
		err = addDeliveries(ctx, f.notify.box, ns)
	}
	return ns, last, err
}

// ownersWith is each node's operator, as the seed names it and as the
// token file's agent lines do (main refuses the two disagreeing).
func (f *fleet) ownersWith(toks tokens) map[string]string {
	out, _ := toks.owners()
	if out == nil {
		out = map[string]string{}
	}
	for node, op := range f.owners {
		out[node] = op
	}
	return out
}

// nodesOf is operator's nodes, sorted.
func nodesOf(owners map[string]string, operator string) []string {
	var ids []string
	for node, op := range owners {
		if op == operator {
			ids = append(ids, node)
		}
	}
	slices.Sort(ids)
	return ids
}

// operatorView is what an operator sees of their node: its state in the
// help page's words, its figures, its sessions and earnings, its
// events; never a user's id, key or route (users' data is the
// platform's).
type operatorView struct {
	ID            string               `json:"id"`
	Registered    bool                 `json:"registered"`
	Role          string               `json:"role,omitempty"`
	Country       string               `json:"country,omitempty"`
	Status        string               `json:"status"` // the node's state in the help page's words
	Paused        bool                 `json:"paused"`
	Overloaded    bool                 `json:"overloaded"`
	Since         time.Time            `json:"since,omitzero"`
	OverloadEnded time.Time            `json:"overload_ended,omitzero"`
	Findings      []overload.Finding   `json:"findings"`
	Admitted      bool                 `json:"admitted"`
	Reason        routing.Reason       `json:"reason,omitempty"`
	MemoryPercent float64              `json:"memory_percent"`
	LastReading   time.Time            `json:"last_reading,omitzero"`
	Price         pricing.Price        `json:"price"`
	MaxUsers      int                  `json:"max_users"`
	LiveUsers     int                  `json:"live_users"`
	Sessions      int                  `json:"sessions"`
	Earned        pricing.Money        `json:"earned"` // by its sessions, running and closed (the latest closures)
	Notices       int                  `json:"notices"`
	Deliveries    []store.DeliveryView `json:"deliveries,omitempty"`
	Readings      int64                `json:"readings"`
	Events        []overload.Event     `json:"events"`
}

// status words, as the help page says them.
const (
	statusWordsPaused     = "routing paused: the node is being emptied"
	statusWordsOverloaded = "overloaded: new connections refused"
	statusWordsFull       = "max_users filled: your cap, not an overload"
	statusWordsCoolDown   = "cooling down after an overload: offered again soon"
	statusWordsAdmitted   = "taking new connections"
	statusWordsUnknown    = "not in the route table: reports kept, no routes"
)

// operatorViewOf is v as its operator sees it.
func operatorViewOf(v nodeView) operatorView {
	o := operatorView{
		ID: v.ID, Registered: v.Registered, Role: v.Role, Country: v.Country, Paused: v.Paused,
		Overloaded: v.Overloaded, Since: v.Since, OverloadEnded: v.OverloadEnded, Findings: v.Findings,
		Admitted: v.Admitted, Reason: v.Reason, MemoryPercent: v.MemoryPercent, LastReading: v.LastReading,
		Price: v.Price, MaxUsers: v.MaxUsers, LiveUsers: v.LiveUsers, Sessions: len(v.Routes),
		Notices: v.Notices, Deliveries: v.Deliveries, Readings: v.Readings, Events: v.Events,
	}
	for _, rt := range v.Routes {
		o.Earned += rt.Earned.Total
	}
	for _, c := range v.Closed {
		o.Earned += c.Earned.Total
	}
	switch {
	case !v.Registered:
		o.Status = statusWordsUnknown
	case v.Reason == routing.ReasonPaused:
		o.Status = statusWordsPaused
	case v.Reason == routing.ReasonOverloaded:
		o.Status = statusWordsOverloaded
	case v.Reason == routing.ReasonFull:
		o.Status = statusWordsFull
	case v.Reason == routing.ReasonCoolDown:
		o.Status = statusWordsCoolDown
	case v.Admitted:
		o.Status = statusWordsAdmitted
	default:
		o.Status = v.Why
	}
	return o
}

// operatorViews shows the nodes of ids (an operator's, sorted) after
// after, at most limit, as their operator sees them; ids the store does
// not hold are left out.
func (f *fleet) operatorViews(ctx context.Context, ids []string, after string, limit int) ([]operatorView, string, error) {
	out := []operatorView{}
	last := ""
	for _, id := range ids[sortSearch(ids, after):] {
		if limit > 0 && len(out) == limit {
			break
		}
		v, err := f.View(ctx, id)
		if errors.Is(err, store.ErrUnknownNode) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		out, last = append(out, operatorViewOf(v)), id
	}
	return out, last, nil
}

// noticesOf is notices, of the nodes keep keeps (nil: all): a page of
// at most limit after after, and the last one's id.
func (f *fleet) noticesOf(ctx context.Context, keep func(node string) bool, after int64, limit int) ([]store.NumberedNotice, int64, error) {
	if keep == nil {
		return f.Notices(ctx, after, limit)
	}
	out := []store.NumberedNotice{}
	last := after
	for {
		ns, _, err := f.store.Notices(ctx, last, maxPage)
		if err != nil {
			return nil, 0, err
		}
		for _, n := range ns {
			if len(out) == limit {
				break
			}
			last = n.ID
			if keep(n.Node) {
				out = append(out, n)
			}
		}
		if len(ns) < maxPage || len(out) == limit {
			break
		}
	}
	if f.notify != nil && f.notify.box != nil {
		if err := addDeliveries(ctx, f.notify.box, out); err != nil {
			return nil, 0, err
		}
	}
	return out, last, nil
}

// maxUsersRequest sets a node's max_users.
type maxUsersRequest struct {
	Node     string `json:"node"`
	MaxUsers int    `json:"max_users"`
}

// setMaxUsers sets the node's cap of live users (0: none): a node whose
// cap is filled takes nobody new, which is not an overload.
func (f *fleet) setMaxUsers(ctx context.Context, req maxUsersRequest) error {
	if err := store.CheckNodeID(req.Node); err != nil {
		return fmt.Errorf("max_users: %w", err)
	}
	if req.MaxUsers < 0 {
		return fmt.Errorf("max_users of %s: %d: want 0 (no cap) or more: %w", req.Node, req.MaxUsers, store.ErrBadInput)
	}
	err := f.store.Update(ctx, req.Node, func(n *store.Node, _ time.Time, _ store.NodeTx) error {
		if n.Info.Role == 0 {
			return fmt.Errorf("max_users of %q: %w", req.Node, store.ErrUnknownNode)
		}
		n.Info.MaxUsers = req.MaxUsers
		return nil
	})
	if err == nil {
		f.Log.Info("max_users changed", "node", req.Node, "max_users", req.MaxUsers)
	}
	return err
}

// pause pauses routing to node id (paused), or approves it again: from
// the next admission and plan on, routing's paused rules hold (nobody
// new; every route unused for two hours closed; above the move
// threshold, routes in use moved). Each change goes into the node's
// event list ("paused", "approved"); pausing a paused node, or approving
// one not paused, changes nothing.
func (f *fleet) pause(ctx context.Context, id string, paused bool) error {
	if err := store.CheckNodeID(id); err != nil {
		return err
	}
	changed := false
	err := f.store.Update(ctx, id, func(n *store.Node, now time.Time, _ store.NodeTx) error {
		if n.Info.Role == 0 {
			return fmt.Errorf("node %q: %w", id, store.ErrUnknownNode)
		}
		if changed = n.Info.Paused != paused; !changed {
			return nil
		}
		n.Info.Paused = paused
		ev := overload.Event{Kind: store.EventApproved, At: now}
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

// Redeliver sends notice id again, with its first webhook-id, if keep
// (nil: any) keeps its node: a notice of another operator's node is not
// found, as one that does not exist. The delivery is due at once and
// keeps its log.
func (f *fleet) Redeliver(ctx context.Context, id int64, keep func(node string) bool) error {
	notFound := fmt.Errorf("notice %d: %w", id, store.ErrUnknown)
	if id < 1 {
		return notFound
	}
	ns, _, err := f.store.Notices(ctx, id-1, 1)
	if err != nil {
		return err
	}
	if len(ns) == 0 || ns[0].ID != id || (keep != nil && !keep(ns[0].Node)) {
		return notFound
	}
	if f.notify == nil || f.notify.box == nil {
		return fmt.Errorf("notice %d: %w (no deliveries: the platform runs without -notify-file)", id, store.ErrUnknown)
	}
	did := noticeID(ns[0].Node, ns[0].At)
	found, err := f.notify.box.Redeliver(ctx, did, f.Now())
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("notice %d: %w (no delivery: decided before the platform delivered notices)", id, store.ErrUnknown)
	}
	f.Log.Info("notice to be delivered again", "notice", id, "id", did, "node", ns[0].Node)
	f.dispatch.poke()
	return nil
}
