package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/notify"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// Fleet is the platform's use cases, each written once over a store.
// Each reads the clock once, through its store (see NodeStore.Update),
// and hands that time to the pure packages.
type Fleet struct {
	*store.Rules
	// Store is the store the use cases run on.
	Store store.Store
	// Dispatch is the receivers in force and the notifier's wake-up:
	// the store's Config.Dispatch when it is a *notify.Dispatch, as main
	// makes it (nil: none).
	Dispatch *notify.Dispatch
	// Notify is the notifier delivering the store's outbox; nil: notices
	// are not delivered.
	Notify *notify.Notifier
	// receivers keeps the operators' own receivers: the store.
	receivers store.ReceiverStore
	// Owners is each node's operator as the route table names it (and,
	// once wired, the token file too: ownersWith).
	Owners map[string]string
}

// New is the use cases over st, whose deliveries n delivers (nil:
// none).
func New(st store.Store, n *notify.Notifier) *Fleet {
	f := &Fleet{Rules: st.Base(), Store: st, receivers: st, Notify: n}
	f.Dispatch, _ = f.Config.Dispatch.(*notify.Dispatch)
	if n != nil {
		n.Attempted = f.attempted
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
func (f *Fleet) Report(ctx context.Context, r overload.Reading) (ReportOutcome, error) {
	if err := store.CheckNodeID(r.Node); err != nil {
		return ReportOutcome{}, fmt.Errorf("report: %w", err)
	}
	// One value the store's take and plan share, allocated once a
	// report. The store may take the reading and plan the node more than
	// once (on its copy, then on its row; a transaction run again): each
	// take starts the run afresh, and the plan's error is logged once,
	// that of the run the store kept.
	run := &struct {
		out     ReportOutcome
		at      time.Time
		first   bool // the first reading counted of a node the route table does not hold
		planErr error
	}{out: ReportOutcome{Node: r.Node}}
	notice, err := f.Store.Report(ctx, r.Node, func(n *store.Node, now time.Time) error {
		run.first = n.Info.Role == 0 && n.Readings == 0
		run.planErr = nil
		var err error
		run.out, err = f.Take(n, r, now)
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
		return ReportOutcome{}, err
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
	if f.Dispatch != nil && (out.Notice != nil || (out.Event != nil && out.Event.Kind == overload.End && f.Dispatch.SendsEnds())) &&
		f.Dispatch.Receivers().ForNode(r.Node) != nil {
		f.Dispatch.Poke()
	}
	return out, nil
}

// PlanNode plans node n at now and carries the plan out in n (plan),
// for the store to write; a plan that fails is logged, and leaves n as
// it was.
func (f *Fleet) PlanNode(n *store.Node, now time.Time, tx store.NodeTx) error {
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
func (f *Fleet) plan(n *store.Node, now time.Time, tx store.NodeTx) (planErr, err error) {
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

// PlanRound plans every node whose plan is due.
func (f *Fleet) PlanRound(ctx context.Context) error { return f.Store.PlanDue(ctx, f.PlanNode) }

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
			return fmt.Errorf("open route through %q: %w", req.Node, store.ErrUnknownNode)
		}
		if a := f.admitLocked(n, now); !a.Admit {
			return AdmitError{Answer: a}
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
func (f *Fleet) View(ctx context.Context, id string) (NodeView, error) {
	if err := store.CheckNodeID(id); err != nil {
		return NodeView{}, err
	}
	var v NodeView
	err := f.Store.Read(ctx, id, true, func(n *store.Node, now time.Time) error {
		v = f.viewLocked(n, now)
		return nil
	})
	if err != nil {
		return NodeView{}, err
	}
	if f.Notify.Outbox() != nil {
		if v.Deliveries, err = nodeDeliveries(ctx, f.Notify.Outbox(), v.ID); err != nil {
			return NodeView{}, err
		}
	}
	return v, nil
}

// Views shows the nodes whose ids sort after after, at most limit of
// them (0: all), by id, and returns the last one's id. A node that cannot
// be shown (its stored state does not read, or does not marshal) is
// listed with its error alone: one node's bad state never takes the
// fleet's view down.
func (f *Fleet) Views(ctx context.Context, after string, limit int) ([]json.RawMessage, string, error) {
	out := []json.RawMessage{}
	last, err := f.Store.EachNode(ctx, after, limit, func(id string, n *store.Node, now time.Time, err error) {
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
func (f *Fleet) Events(ctx context.Context, id string, after int64, limit int) (store.EventPage, error) {
	return f.Store.Events(ctx, id, after, limit)
}

// Plans pages through each node's latest plan that closed something.
func (f *Fleet) Plans(ctx context.Context, after string, limit int) ([]routing.Plan, string, error) {
	return f.Store.Plans(ctx, after, limit)
}

// Notices returns the notices after after, at most limit, each with its
// delivery when notices are delivered.
func (f *Fleet) Notices(ctx context.Context, after int64, limit int) ([]store.NumberedNotice, int64, error) {
	ns, last, err := f.Store.Notices(ctx, after, limit)
	if err == nil && f.Notify.Outbox() != nil {
		err = AddDeliveries(ctx, f.Notify.Outbox(), ns)
	}
	return ns, last, err
}

// NodesOf is operator's nodes, sorted.
func NodesOf(owners map[string]string, operator string) []string {
	var ids []string
	for node, op := range owners {
		if op == operator {
			ids = append(ids, node)
		}
	}
	slices.Sort(ids)
	return ids
}

// OperatorView is what an operator sees of their node: its state in the
// help page's words, its figures, its sessions and earnings, its
// events; never a user's id, key or route (users' data is the
// platform's).
type OperatorView struct {
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
	StatusWordsOverloaded = "overloaded: new connections refused"
	StatusWordsFull       = "max_users filled: your cap, not an overload"
	StatusWordsCoolDown   = "cooling down after an overload: offered again soon"
	StatusWordsAdmitted   = "taking new connections"
	statusWordsUnknown    = "not in the route table: reports kept, no routes"
)

// OperatorViewOf is v as its operator sees it.
func OperatorViewOf(v NodeView) OperatorView {
	o := OperatorView{
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
		o.Status = StatusWordsOverloaded
	case v.Reason == routing.ReasonFull:
		o.Status = StatusWordsFull
	case v.Reason == routing.ReasonCoolDown:
		o.Status = StatusWordsCoolDown
	case v.Admitted:
		o.Status = StatusWordsAdmitted
	default:
		o.Status = v.Why
	}
	return o
}

// OperatorViews shows the nodes of ids (an operator's, sorted) after
// after, at most limit, as their operator sees them; ids the store does
// not hold are left out.
func (f *Fleet) OperatorViews(ctx context.Context, ids []string, after string, limit int) ([]OperatorView, string, error) {
	out := []OperatorView{}
	last := ""
	for _, id := range ids[store.IndexAfter(ids, after):] {
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
		out, last = append(out, OperatorViewOf(v)), id
	}
	return out, last, nil
}

// NoticesOf is notices, of the nodes keep keeps (nil: all): a page of
// at most limit after after, and the last one's id.
func (f *Fleet) NoticesOf(ctx context.Context, keep func(node string) bool, after int64, limit int) ([]store.NumberedNotice, int64, error) {
	if keep == nil {
		return f.Notices(ctx, after, limit)
	}
	out := []store.NumberedNotice{}
	last := after
	for {
		ns, _, err := f.Store.Notices(ctx, last, MaxPage)
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
		if len(ns) < MaxPage || len(out) == limit {
			break
		}
	}
	if f.Notify.Outbox() != nil {
		if err := AddDeliveries(ctx, f.Notify.Outbox(), out); err != nil {
			return nil, 0, err
		}
	}
	return out, last, nil
}

// MaxUsersRequest sets a node's max_users.
type MaxUsersRequest struct {
	Node     string `json:"node"`
	MaxUsers int    `json:"max_users"`
}

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
func (f *Fleet) Redeliver(ctx context.Context, id int64, keep func(node string) bool) error {
	notFound := fmt.Errorf("notice %d: %w", id, store.ErrUnknown)
	if id < 1 {
		return notFound
	}
	ns, _, err := f.Store.Notices(ctx, id-1, 1)
	if err != nil {
		return err
	}
	if len(ns) == 0 || ns[0].ID != id || (keep != nil && !keep(ns[0].Node)) {
		return notFound
	}
	if f.Notify.Outbox() == nil {
		return fmt.Errorf("notice %d: %w (no deliveries: the platform runs without -notify-file)", id, store.ErrUnknown)
	}
	did := notify.NoticeID(ns[0].Node, ns[0].At)
	found, err := f.Notify.Outbox().Redeliver(ctx, did, f.Now())
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("notice %d: %w (no delivery: decided before the platform delivered notices)", id, store.ErrUnknown)
	}
	f.Log.Info("notice to be delivered again", "notice", id, "id", did, "node", ns[0].Node)
	f.Dispatch.Poke()
	return nil
}

// maxAhead is how far ahead of the platform's clock a version 1 reading
// may be taken. Version 1 readings are ordered by time, so one from the
// future, counted, would make every honest reading after it "out of
// order" until the clock caught up. Version 2 readings are ordered by
// their run and seq, so a node whose clock stepped ahead loses nothing;
// for them only overload's own bound (Reading.ValidateAt) applies.
const maxAhead = 5 * time.Minute

// ReportOutcome is what one reading did.
type ReportOutcome struct {
	Node       string           `json:"node"`
	Overloaded bool             `json:"overloaded"`
	Event      *overload.Event  `json:"event,omitempty"`
	Notice     *overload.Notice `json:"notice,omitempty"`
}

// Take is a report's first step on node n, locked by the store: the
// tracker observes reading r, taken at now by the platform's clock, and
// n is dated by it; the outcome is logged by Report (logOutcome), not
// here. The error of a duplicate or older reading wraps
// store.ErrDuplicate or store.ErrStale.
func (c *Fleet) Take(n *store.Node, r overload.Reading, now time.Time) (ReportOutcome, error) {
	if r.Run == "" && r.At.After(now.Add(maxAhead)) {
		return ReportOutcome{}, fmt.Errorf("report of %s: taken at %s, more than %v ahead of the platform's clock: %w",
			r.Node, r.At.Format(time.RFC3339), maxAhead, store.ErrBadInput)
	}
	if err := r.ValidateAt(now); err != nil {
		return ReportOutcome{}, fmt.Errorf("report of %s: %w: %w", r.Node, store.ErrBadInput, err)
	}
	res, err := n.Tracker.Observe(r)
	switch {
	case errors.Is(err, overload.ErrDuplicate):
		return ReportOutcome{Node: r.Node, Overloaded: n.Tracker.Overloaded()}, fmt.Errorf("report of %s at %s: %w", r.Node, r.At.Format(time.RFC3339Nano), store.ErrDuplicate)
	case errors.Is(err, overload.ErrOutOfOrder):
		return ReportOutcome{Node: r.Node, Overloaded: n.Tracker.Overloaded()}, fmt.Errorf("report of %s at %s: %w", r.Node, r.At.Format(time.RFC3339Nano), store.ErrStale)
	case err != nil:
		return ReportOutcome{}, fmt.Errorf("report of %s: %w: %w", r.Node, store.ErrBadInput, err)
	}
	n.Readings++
	if res.Event != nil {
		n.EventsSeen++
	}
	// routing's own adapter: overload start and end from the tracker, and
	// memory from this reading (0 when the reading lacks it, so a stale
	// figure never counts as above the move threshold).
	ended := n.Info.OverloadEnded
	n.Info.SetOverload(n.Tracker, r)
	platformClock(n, res.Event, ended, now)
	return ReportOutcome{Node: r.Node, Overloaded: res.Overloaded, Event: res.Event, Notice: res.Notice}, nil
}

// logOutcome logs what a reading taken at now started or ended, and its
// notice.
func (c *Fleet) logOutcome(r overload.Reading, out ReportOutcome, now time.Time) {
	if ev := out.Event; ev != nil {
		switch ev.Kind {
		case overload.Start:
			c.Log.Warn("overload started", "node", r.Node, "at", now, "reading_at", ev.At, "findings", overload.Texts(ev.Findings))
		case overload.End:
			c.Log.Info("overload ended", "node", r.Node, "at", now, "reading_at", ev.At, "lasted", ev.Lasted,
				"offered_again", c.Config.Policy.OfferedAgain(now))
		}
	}
	if out.Notice != nil {
		c.Log.Warn("notice", "node", r.Node, "text", out.Notice.Text)
	}
}

// platformClock dates the overload's start and end by the platform's
// clock, when it received the readings, so the move delay and the
// cool-down run on one clock whatever the node's says: an agent whose
// clock is behind starts no move early and shortens no cool-down. The
// readings' own times still order them and are shown beside.
func platformClock(n *store.Node, ev *overload.Event, ended, now time.Time) {
	n.Info.OverloadEnded = ended
	if ev != nil {
		switch ev.Kind {
		case overload.Start:
			n.StartedAt = now
		case overload.End:
			n.StartedAt, n.Info.OverloadEnded = time.Time{}, now
		}
	}
	n.Info.OverloadedSince = time.Time{}
	if n.Tracker.Overloaded() {
		n.Info.OverloadedSince = n.StartedAt
		if n.StartedAt.IsZero() { // state kept before the platform dated starts
			n.Info.OverloadedSince = n.Tracker.Since()
		}
	}
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

// planOne plans node n at now and carries out the plan in n: its closed
// routes leave n.Routes for n.Closing, their sessions end, the routes
// its moves rely on go into n.Relied, and n's budgets move on;
// n.Replanned says whether n changed in a way worth saving (a round that
// changed only the plan time is not: the budgets, which pace moves and
// closures, are what the next plan needs). An unregistered node is not
// planned.
func (c *Fleet) planOne(now time.Time, n *store.Node, alts routing.Alternatives) (routing.Plan, error) {
	if n.Info.Role == 0 {
		return routing.Plan{}, nil
	}
	routes := c.AppendPricedRoutes(make([]routing.Route, 0, len(n.Routes)), n, now)
	plan, err := c.Config.Policy.Plan(now, n.Info, routes, alts)
	if err != nil {
		return routing.Plan{}, err
	}
	budgetsChanged := !sameBudgets(n.Info.State, plan.State)
	n.Info.State = plan.State
	for _, a := range plan.Actions {
		rt := n.Routes[a.Route.ID]
		delete(n.Routes, a.Route.ID)
		rt.Session.End = now
		cr := store.ClosedRoute{Action: a, At: now, Earned: rt.Earned, Session: rt.Session}
		n.Closed = store.AppendBounded(n.Closed, cr, store.MaxClosed)
		n.Closing = append(n.Closing, cr)
		if keeps, ok := store.ReliesOn(a); ok {
			n.Relied = append(n.Relied, keeps)
		}
	}
	if len(plan.Actions) > 0 {
		n.LastPlan = &plan
		n.Info.LiveUsers = store.LiveUsers(n)
	}
	n.Replanned = n.Replanned || len(plan.Actions) > 0 || budgetsChanged
	return plan, nil
}

// sameBudgets reports whether two plan states hold the same budgets; the
// plan time alone is not worth a write: the budgets, which pace moves and
// closures, are what the next plan needs. The period between plans is
// not worth one either: a stale stored period only bounds how far the
// pace may fall behind after a restart.
func sameBudgets(a, b routing.NodeState) bool {
	a.PlannedAt, b.PlannedAt = time.Time{}, time.Time{}
	a.Period, b.Period = 0, 0
	return a.Equal(b)
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

// PriceRequest changes a node's asking price.
type PriceRequest struct {
	Node  string        `json:"node"`
	Price pricing.Price `json:"price"`
}

// NodeView is what /nodes shows of a node.
type NodeView struct {
	ID            string               `json:"id"`
	Registered    bool                 `json:"registered"`
	Role          string               `json:"role,omitempty"`
	Country       string               `json:"country,omitempty"`
	Paused        bool                 `json:"paused"`
	Overloaded    bool                 `json:"overloaded"`
	Since         time.Time            `json:"since,omitzero"`          // by the platform's clock
	SinceReading  time.Time            `json:"since_reading,omitzero"`  // the same, by the node's
	OverloadEnded time.Time            `json:"overload_ended,omitzero"` // by the platform's clock
	Findings      []overload.Finding   `json:"findings"`
	Admitted      bool                 `json:"admitted"`
	Reason        routing.Reason       `json:"reason,omitempty"`
	Why           string               `json:"why,omitempty"`
	MemoryPercent float64              `json:"memory_percent"`
	LastReading   time.Time            `json:"last_reading,omitzero"`
	Price         pricing.Price        `json:"price"`
	MaxUsers      int                  `json:"max_users"`
	LiveUsers     int                  `json:"live_users"`
	Routes        []store.Route        `json:"routes"`
	PlanState     routing.NodeState    `json:"plan_state"`
	LastPlan      *routing.Plan        `json:"last_plan,omitempty"`
	Closed        []store.ClosedRoute  `json:"closed"`
	Notices       int                  `json:"notices"`
	Deliveries    []store.DeliveryView `json:"deliveries,omitempty"` // the newest messages' deliveries, newest first
	Readings      int64                `json:"readings"`
	Events        []overload.Event     `json:"events"`
}

// marshalView is v in JSON, or, if it cannot be, {"id","error"}.
func marshalView(id string, v NodeView) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"id": id, "error": fmt.Sprintf("node %s cannot be shown: %v", id, err)})
	}
	return b
}

func (p *Fleet) viewLocked(n *store.Node, now time.Time) NodeView {
	ok, why, admitErr := p.Config.Policy.Admit(n.Info, now)
	v := NodeView{
		ID: n.Info.ID, Registered: n.Info.Role != 0, Country: n.Info.Country, Paused: n.Info.Paused,
		Overloaded: n.Tracker.Overloaded(), Since: n.Info.OverloadedSince, SinceReading: n.Tracker.Since(), OverloadEnded: n.Info.OverloadEnded,
		Findings: n.Tracker.Findings(), Admitted: ok, Reason: why, MemoryPercent: n.Info.MemoryPercent,
		LastReading: n.Tracker.LastReading(), Price: n.Info.Price, MaxUsers: n.Info.MaxUsers,
		LiveUsers: n.Info.LiveUsers, PlanState: n.Info.State, LastPlan: n.LastPlan,
		Closed: slices.Clone(n.Closed), Notices: len(n.Notices) + n.NoticeCount, Readings: n.Readings,
		Routes: []store.Route{},
	}
	if admitErr != nil { // not registered (no role), or invalid: not admitted
		v.Why = admitErr.Error()
	}
	if v.Findings == nil {
		v.Findings = []overload.Finding{}
	}
	v.Events = []overload.Event{}
	for _, e := range store.EventList(n) {
		v.Events = append(v.Events, e.Event)
	}
	if v.Closed == nil {
		v.Closed = []store.ClosedRoute{}
	}
	if why != "" {
		v.Why = why.String()
	}
	if n.Info.Role != 0 {
		v.Role = n.Info.Role.String()
	}
	for _, rid := range slices.Sorted(maps.Keys(n.Routes)) {
		rt := *n.Routes[rid]
		rt.Route.Price = p.SessionPrice(n, &rt, now)
		v.Routes = append(v.Routes, rt)
	}
	return v
}

// AddDeliveries sets each notice's delivery. A notice the outbox does not
// hold (decided before there was one) shows as undeliverable.
func AddDeliveries(ctx context.Context, box store.OutboxStore, ns []store.NumberedNotice) error {
	ids := make([]string, len(ns))
	for i, nt := range ns {
		ids[i] = notify.NoticeID(nt.Node, nt.At)
	}
	got, err := box.ByIDs(ctx, ids)
	if err != nil {
		return err
	}
	for i := range ns {
		v := store.DeliveryView{ID: ids[i], Type: store.TypeOverloaded, Status: store.StatusUndeliverable}
		if d, ok := got[ids[i]]; ok {
			v = d.View()
		}
		ns[i].Delivery = &v
	}
	return nil
}

// maxNodeDeliveries is how many of a node's deliveries /nodes/X shows.
const maxNodeDeliveries = 10

// nodeDeliveries is what /nodes/X shows of the node's deliveries.
func nodeDeliveries(ctx context.Context, box store.OutboxStore, node string) ([]store.DeliveryView, error) {
	ds, err := box.ByNode(ctx, node, maxNodeDeliveries)
	if err != nil {
		return nil, err
	}
	out := make([]store.DeliveryView, len(ds))
	for i := range ds {
		out[i] = ds[i].View()
	}
	return out, nil
}

// NotifyUnreached puts the operators' own receivers in force, and says
// at start which nodes have no receiver: their notices are kept, and
// marked undeliverable.
func (f *Fleet) NotifyUnreached(ctx context.Context, log *slog.Logger) {
	if err := f.refreshReceivers(ctx); err != nil {
		log.Warn("notify: the operators' receivers not read", "err", err)
	}
	f.Notify.LogUnreached(ctx, log, f.Store.NodeIDs)
}

// Every list the API serves (GET /nodes, /nodes/X/events, /notices,
// /plans) pages the same way. ?limit=N (1 to MaxPage, by default
// MaxPage) is the most items a page holds; a page that may be followed
// by more has a header Link: <PATH?after=CURSOR&limit=N>; rel="next",
// and a page without it is the last. The cursor is the list's own (a node
// id, an event id, a notice id): a client takes it from the Link as it
// is and never builds one.
const MaxPage = 1000

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
