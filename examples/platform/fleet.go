package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/proofkit/nodekit/overload"
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
	// report takes a reading of node id: take, then plan, on the node
	// locked, created if the store does not hold it; what they changed,
	// the event, notice and closures they decided (node.clearChange's
	// fields) included, is kept when both return nil. take's error is
	// the reading's own (refused): nothing of it is kept, and a node
	// created for it is not. It returns the notice as kept: nil when
	// the store refused it (PostgreSQL decides the one notice an hour in
	// the database too).
	//
	// How is the store's: it may run take and plan again (a transaction
	// run again), run them beside other reports' in one transaction
	// (batching), or run take on its own copy of the node before it
	// locks it and plan there too, keeping the result only if the node
	// has not changed since the copy (PostgreSQL's cache of quiet
	// nodes). So take and plan change only n and what they capture, and
	// plan asks tx for routes only when it needs them.
	report(ctx context.Context, id string, take takeFunc, plan planFunc) (*overload.Notice, error)
	// planDue runs plan on every registered node whose plan is due, each
	// locked, and keeps what it changed; a node whose plan fails is
	// logged and left, and the round goes on (PostgreSQL returns an
	// error naming them).
	planDue(ctx context.Context, plan planFunc) error
	// routeNode is the node that holds live route id; an error wrapping
	// errUnknown when none does.
	routeNode(ctx context.Context, id string) (string, error)
	// nodeIDs is every node's id, sorted.
	nodeIDs(ctx context.Context) ([]string, error)

	// The pages, each of at most limit items (0: all) after the cursor
	// after, with the last one's cursor:
	//
	// eachNode runs fn on the nodes whose ids sort after after, by id,
	// as one snapshot shows them, with their live routes and notice
	// counts; a node whose stored state cannot be read is given with
	// its error (and n nil). fn must not change n.
	eachNode(ctx context.Context, after string, limit int, fn func(id string, n *node, now time.Time, err error)) (string, error)
	// events pages through node id's events, oldest first, by their
	// place in the node's event list (the file store keeps the newest
	// overload.Limits.MaxEvents, PostgreSQL every one).
	events(ctx context.Context, id string, after int64, limit int) (eventPage, error)
	// notices pages through every node's notices by id, the order they
	// became visible in.
	notices(ctx context.Context, after int64, limit int) ([]numberedNotice, int64, error)
	// plans pages through each node's latest plan that closed something,
	// by node id.
	plans(ctx context.Context, after string, limit int) ([]routing.Plan, string, error)
}

// takeFunc takes a reading on node n at now (nodeStore.report).
type takeFunc func(n *node, now time.Time) error

// planFunc plans node n at now (nodeStore.report and planDue).
type planFunc func(n *node, now time.Time, tx nodeTx) error

// nodeTx is what a use case may ask of the store while it holds a node.
type nodeTx interface {
	// routeTaken reports whether a route id is held by a node already.
	routeTaken(id string) (bool, error)
	// alternatives loads n's live routes into n, if the store keeps
	// them apart and has not yet, and answers routing's question for a
	// plan of n at now: the alternatives in the whole route table.
	alternatives(n *node, now time.Time) (routing.Alternatives, error)
	// failed is the first error the store met answering alternatives:
	// the change then fails.
	failed() error
}

// store is a whole store: the use cases' nodeStore and receiverStore,
// and what wires it.
type store interface {
	nodeStore
	receiverStore
	// base is the store's rules: its configuration, log, clock and
	// dispatch.
	base() *rules
	// outbox is the store's outbox of deliveries; nil without a dispatch.
	outbox() outboxStore
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
	// notify is the notifier delivering the store's outbox; nil: notices
	// are not delivered.
	notify *notifier
	// receivers keeps the operators' own receivers: the store.
	receivers receiverStore
	// owners is each node's operator as the route table names it (and,
	// once wired, the token file too: ownersWith).
	owners map[string]string
}

// newFleet is the use cases over st, whose deliveries n delivers (nil:
// none).
func newFleet(st store, n *notifier) *fleet {
	f := &fleet{rules: st.base(), store: st, receivers: st, notify: n}
	if n != nil {
		n.attempted = f.attempted
	}
	return f
}

// report takes reading r of the node it names and plans the node: a
// reading the node's tracker already counted returns errDuplicate and
// an older one errStale, with the node's name and state; both change
// nothing. The outcome is logged, and the notifier woken for what it
// sent, once the store has kept it: only for a node with a receiver (a
// wake costs the PostgreSQL store a claim, a statement and a commit,
// which for an undeliverable notice finds nothing).
func (f *fleet) report(ctx context.Context, r overload.Reading) (reportOutcome, error) {
	if err := checkNodeID(r.Node); err != nil {
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
	notice, err := f.store.report(ctx, r.Node, func(n *node, now time.Time) error {
		run.first = n.info.Role == 0 && n.readings == 0
		run.planErr = nil
		var err error
		run.out, err = f.take(n, r, now)
		n.event, n.notice, run.at = run.out.Event, run.out.Notice, now
		return err
	}, func(n *node, now time.Time, tx nodeTx) (err error) {
		run.planErr, err = f.plan(n, now, tx)
		return err
	})
	out, at, first, planErr := run.out, run.at, run.first, run.planErr
	switch {
	case errors.Is(err, errDuplicate) || errors.Is(err, errStale):
		return out, err
	case err != nil:
		return reportOutcome{}, err
	}
	out.Notice = notice
	if planErr != nil {
		f.log.Error("plan round", "node", r.Node, "err", planErr)
	}
	if first {
		f.log.Warn("reports from a node the route table does not hold: tracked, not admitted until it is, never planned",
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
func (f *fleet) planNode(n *node, now time.Time, tx nodeTx) error {
	planErr, err := f.plan(n, now, tx)
	if planErr != nil {
		f.log.Error("plan round", "node", n.info.ID, "err", planErr)
	}
	return err
}

// plan plans node n at now and carries the plan out in n (planOne):
// planErr is the plan's own failure, which changes nothing; err the
// store's (tx), which fails the node's write. A node whose plan can
// change nothing but its budgets' dates (quiet) is planned without its
// routes, which the PostgreSQL store then need not read.
func (f *fleet) plan(n *node, now time.Time, tx nodeTx) (planErr, err error) {
	if n.info.Role == 0 {
		return nil, nil
	}
	var alts routing.Alternatives
	if !f.quiet(n, now) {
		if alts, err = tx.alternatives(n, now); err != nil {
			return nil, err
		}
	}
	_, planErr = f.planOne(now, n, alts)
	if err := tx.failed(); err != nil {
		return nil, err
	}
	return planErr, nil
}

// planRound plans every node whose plan is due.
func (f *fleet) planRound(ctx context.Context) error { return f.store.planDue(ctx, f.planNode) }

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

// views shows the nodes whose ids sort after after, at most limit of
// them (0: all), by id, and returns the last one's id. A node that cannot
// be shown (its stored state does not read, or does not marshal) is
// listed with its error alone: one node's bad state never takes the
// fleet's view down.
func (f *fleet) views(ctx context.Context, after string, limit int) ([]json.RawMessage, string, error) {
	out := []json.RawMessage{}
	last, err := f.store.eachNode(ctx, after, limit, func(id string, n *node, now time.Time, err error) {
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

// events pages through node id's events, oldest first.
func (f *fleet) events(ctx context.Context, id string, after int64, limit int) (eventPage, error) {
	return f.store.events(ctx, id, after, limit)
}

// plans pages through each node's latest plan that closed something.
func (f *fleet) plans(ctx context.Context, after string, limit int) ([]routing.Plan, string, error) {
	return f.store.plans(ctx, after, limit)
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
	ID            string             `json:"id"`
	Registered    bool               `json:"registered"`
	Role          string             `json:"role,omitempty"`
	Country       string             `json:"country,omitempty"`
	Status        string             `json:"status"` // the node's state in the help page's words
	Paused        bool               `json:"paused"`
	Overloaded    bool               `json:"overloaded"`
	Since         time.Time          `json:"since,omitzero"`
	OverloadEnded time.Time          `json:"overload_ended,omitzero"`
	Findings      []overload.Finding `json:"findings"`
	Admitted      bool               `json:"admitted"`
	Reason        routing.Reason     `json:"reason,omitempty"`
	MemoryPercent float64            `json:"memory_percent"`
	LastReading   time.Time          `json:"last_reading,omitzero"`
	Price         pricing.Price      `json:"price"`
	MaxUsers      int                `json:"max_users"`
	LiveUsers     int                `json:"live_users"`
	Sessions      int                `json:"sessions"`
	Earned        pricing.Money      `json:"earned"` // by its sessions, running and closed (the latest closures)
	Notices       int                `json:"notices"`
	Deliveries    []deliveryView     `json:"deliveries,omitempty"`
	Readings      int64              `json:"readings"`
	Events        []overload.Event   `json:"events"`
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
		v, err := f.view(ctx, id)
		if errors.Is(err, errUnknownNode) {
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
func (f *fleet) noticesOf(ctx context.Context, keep func(node string) bool, after int64, limit int) ([]numberedNotice, int64, error) {
	if keep == nil {
		return f.notices(ctx, after, limit)
	}
	out := []numberedNotice{}
	last := after
	for {
		ns, _, err := f.store.notices(ctx, last, maxPage)
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
	if err := checkNodeID(req.Node); err != nil {
		return fmt.Errorf("max_users: %w", err)
	}
	if req.MaxUsers < 0 {
		return fmt.Errorf("max_users of %s: %d: want 0 (no cap) or more: %w", req.Node, req.MaxUsers, errBadInput)
	}
	err := f.store.update(ctx, req.Node, func(n *node, _ time.Time, _ nodeTx) error {
		if n.info.Role == 0 {
			return fmt.Errorf("max_users of %q: %w", req.Node, errUnknownNode)
		}
		n.info.MaxUsers = req.MaxUsers
		return nil
	})
	if err == nil {
		f.log.Info("max_users changed", "node", req.Node, "max_users", req.MaxUsers)
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
	if err := checkNodeID(id); err != nil {
		return err
	}
	changed := false
	err := f.store.update(ctx, id, func(n *node, now time.Time, _ nodeTx) error {
		if n.info.Role == 0 {
			return fmt.Errorf("node %q: %w", id, errUnknownNode)
		}
		if changed = n.info.Paused != paused; !changed {
			return nil
		}
		n.info.Paused = paused
		ev := overload.Event{Kind: eventApproved, At: now}
		if paused {
			ev.Kind = eventPaused
		}
		n.eventsSeen++
		n.marks = appendBounded(n.marks, numberedEvent{ID: n.eventsSeen, Event: ev}, maxMarks)
		n.event = &ev
		return nil
	})
	switch {
	case err != nil || !changed:
	case paused:
		f.log.Warn("routing paused", "node", id)
	default:
		f.log.Info("node approved: routing resumed", "node", id)
	}
	return err
}

// redeliver sends notice id again, with its first webhook-id, if keep
// (nil: any) keeps its node: a notice of another operator's node is not
// found, as one that does not exist. The delivery is due at once and
// keeps its log.
func (f *fleet) redeliver(ctx context.Context, id int64, keep func(node string) bool) error {
	notFound := fmt.Errorf("notice %d: %w", id, errUnknown)
	if id < 1 {
		return notFound
	}
	ns, _, err := f.store.notices(ctx, id-1, 1)
	if err != nil {
		return err
	}
	if len(ns) == 0 || ns[0].ID != id || (keep != nil && !keep(ns[0].Node)) {
		return notFound
	}
	if f.notify == nil || f.notify.box == nil {
		return fmt.Errorf("notice %d: %w (no deliveries: the platform runs without -notify-file)", id, errUnknown)
	}
	did := noticeID(ns[0].Node, ns[0].At)
	found, err := f.notify.box.redeliver(ctx, did, f.now())
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("notice %d: %w (no delivery: decided before the platform delivered notices)", id, errUnknown)
	}
	f.log.Info("notice to be delivered again", "notice", id, "id", did, "node", ns[0].Node)
	f.dispatch.poke()
	return nil
}
