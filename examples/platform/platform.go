package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// maxAhead is how far ahead of the platform's clock a version 1 reading
// may be taken. Version 1 readings are ordered by time, so one from the
// future, counted, would make every honest reading after it "out of
// order" until the clock caught up. Version 2 readings are ordered by
// their run and seq, so a node whose clock stepped ahead loses nothing;
// for them only overload's own bound (Reading.ValidateAt) applies.
const maxAhead = 5 * time.Minute

// platform keeps one node record per node, behind one lock: every request
// and plan round runs under it, and every change is written to the node's
// file before the lock is released, so what a client was told is on disk.
type platform struct {
	store.Rules

	mu    sync.Mutex
	nodes map[string]*store.Node
	// lastNotice is the id of the newest notice: the next one is
	// lastNotice+1, given under mu and saved before mu is released, so a
	// notice with a higher id was always saved after every lower one.
	lastNotice int64
	box        *fileOutbox // nil without a notifier
	// operators is the operators' own receivers, as operatorsFile holds
	// them.
	operators map[string]store.OperatorReceiver
}

// newPlatform validates cfg, loads the state directory and then the seed
// (nodes and routes the state does not hold yet).
func newPlatform(cfg store.Config, seed *store.SeedFile) (*platform, error) {
	c, err := store.NewRules(cfg)
	if err != nil {
		return nil, err
	}
	p := &platform{Rules: c, nodes: map[string]*store.Node{}}
	if err := p.load(); err != nil {
		return nil, err
	}
	if err := p.loadOperators(); err != nil {
		return nil, err
	}
	if err := p.openOutbox(); err != nil {
		return nil, err
	}
	if seed != nil {
		if err := p.applySeed(seed, p.Now()); err != nil {
			return nil, err
		}
	}
	for _, id := range p.ids() {
		if err := p.save(p.nodes[id]); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// ids returns the node IDs in order, so rounds and listings are stable.
func (p *platform) ids() []string {
	return slices.Sorted(maps.Keys(p.nodes))
}

// reportOutcome is what one reading did.
type reportOutcome struct {
	Node       string           `json:"node"`
	Overloaded bool             `json:"overloaded"`
	Event      *overload.Event  `json:"event,omitempty"`
	Notice     *overload.Notice `json:"notice,omitempty"`
}

// Report takes a reading of node id (NodeStore.Report), under the
// store's one lock: the node, created if new, is written once, after
// take and plan, with the outbox entries of its notice before it. A node
// whose state cannot be saved gets ErrUnsaved, and its record goes back
// to what is on disk: the next request sees what the last answered one
// left.
func (p *platform) Report(_ context.Context, id string, take store.TakeFunc, plan store.PlanFunc) (*overload.Notice, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.Now()
	n := p.nodes[id]
	isNew := n == nil
	if isNew {
		var err error
		if n, err = p.NewNode(id); err != nil {
			return nil, err
		}
	}
	n.ClearChange()
	if err := take(n, now); err != nil {
		if !isNew {
			p.revert(n)
		}
		return nil, err
	}
	if isNew {
		p.nodes[id] = n
	}
	if n.Notice != nil {
		p.lastNotice++
		n.Notices = store.AppendBounded(n.Notices, store.NumberedNotice{ID: p.lastNotice, Notice: *n.Notice}, store.MaxNotices)
	}
	// The outbox first: a notice saved in the node's file is always on
	// its way (see enqueueDecided).
	added, err := p.enqueueDecided(n, now)
	if err != nil {
		p.revert(n)
		return nil, err
	}
	// Plan the node at once, then write what the reading and the plan
	// changed: one write per report (and one for each node a move relies
	// on).
	if err := plan(n, now, &fileTx{p: p, now: now}); err != nil {
		p.revert(n)
		p.dropDecided(added)
		return nil, err
	}
	p.carryOut(n, now, nil)
	if err := p.save(n); err != nil {
		p.revert(n)
		p.dropDecided(added)
		return nil, err
	}
	return n.Notice, nil
}

// take is observe without its log lines, which logOutcome writes.
func (c *fleet) take(n *store.Node, r overload.Reading, now time.Time) (reportOutcome, error) {
	if r.Run == "" && r.At.After(now.Add(maxAhead)) {
		return reportOutcome{}, fmt.Errorf("report of %s: taken at %s, more than %v ahead of the platform's clock: %w",
			r.Node, r.At.Format(time.RFC3339), maxAhead, store.ErrBadInput)
	}
	if err := r.ValidateAt(now); err != nil {
		return reportOutcome{}, fmt.Errorf("report of %s: %w: %w", r.Node, store.ErrBadInput, err)
	}
	res, err := n.Tracker.Observe(r)
	switch {
	case errors.Is(err, overload.ErrDuplicate):
		return reportOutcome{Node: r.Node, Overloaded: n.Tracker.Overloaded()}, fmt.Errorf("report of %s at %s: %w", r.Node, r.At.Format(time.RFC3339Nano), store.ErrDuplicate)
	case errors.Is(err, overload.ErrOutOfOrder):
		return reportOutcome{Node: r.Node, Overloaded: n.Tracker.Overloaded()}, fmt.Errorf("report of %s at %s: %w", r.Node, r.At.Format(time.RFC3339Nano), store.ErrStale)
	case err != nil:
		return reportOutcome{}, fmt.Errorf("report of %s: %w: %w", r.Node, store.ErrBadInput, err)
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
	return reportOutcome{Node: r.Node, Overloaded: res.Overloaded, Event: res.Event, Notice: res.Notice}, nil
}

// logOutcome logs what a reading taken at now started or ended, and its
// notice.
func (c *fleet) logOutcome(r overload.Reading, out reportOutcome, now time.Time) {
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

func (p *fleet) admitLocked(n *store.Node, now time.Time) admitAnswer {
	ok, why, err := p.Config.Policy.Admit(n.Info, now)
	a := admitAnswer{Node: n.Info.ID, Admit: ok, Reason: string(why), At: now}
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

// PlanDue plans every registered node, one after another, over one
// index of the whole route table (fileTx.Alternatives), each node's
// closures recorded in the index before the next node is planned, so two
// nodes never each close the route the other counted on. The example
// "carries out" an action by removing the route from its table, ending
// its pricing session and logging it.
//
// A node's file is written when the round closed something or changed
// its budgets, not for a round that changed only the plan time: a quiet
// fleet costs no disk writes.
func (p *platform) PlanDue(_ context.Context, plan store.PlanFunc) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.Now()
	tx := &fileTx{p: p, now: now}
	for _, id := range p.ids() {
		n := p.nodes[id]
		if n.Info.Role == 0 {
			continue
		}
		n.ClearChange()
		if err := plan(n, now, tx); err != nil {
			p.Log.Error("plan round", "node", id, "err", err)
			p.revert(n)
			continue
		}
		p.carryOut(n, now, tx.idx)
		if !n.Replanned {
			continue
		}
		if err := p.save(n); err != nil {
			p.Log.Error("saving node state", "node", id, "err", err)
			p.revert(n)
		}
	}
	return nil
}

// carryOut logs the closures n's plan decided, takes them out of the
// round's index (nil: none built), and dates the routes its moves rely
// on as in use from now, each saved with its node.
func (p *platform) carryOut(n *store.Node, now time.Time, idx *fleetIndex) {
	for _, c := range n.Closing {
		p.LogClosure(n.Info.ID, c.Action)
		idx.remove(c.Action.Route)
	}
	for _, keeps := range n.Relied {
		kn := p.nodes[keeps.Node]
		if kn == nil || kn.Routes[keeps.ID] == nil {
			continue
		}
		kn.Routes[keeps.ID].ReliedOn = now
		if err := p.save(kn); err != nil {
			p.Log.Error("saving node state", "node", kn.Info.ID, "err", err)
			p.revert(kn)
		}
	}
}

// planOne plans node n at now and carries out the plan in n: its closed
// routes leave n.Routes for n.Closing, their sessions end, the routes
// its moves rely on go into n.Relied, and n's budgets move on;
// n.Replanned says whether n changed in a way worth saving (a round that
// changed only the plan time is not: the budgets, which pace moves and
// closures, are what the next plan needs). An unregistered node is not
// planned.
func (c *fleet) planOne(now time.Time, n *store.Node, alts routing.Alternatives) (routing.Plan, error) {
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

// fleetIndex is the index of the whole route table, each route at its
// session's price at now, for one plan round. It is built when a plan
// first asks for an alternative: only a node moving routes in use asks, so
// a report from a quiet node prices its own routes, not the fleet's. Built
// mid-round, it holds no route the round closed already.
type fleetIndex struct {
	p   *platform
	now time.Time
	idx *routing.Index
}

func (f *fleetIndex) Alternative(r routing.Route) (routing.Route, bool) {
	if f.idx == nil {
		var all []routing.Route
		for _, id := range f.p.ids() {
			all = f.p.AppendPricedRoutes(all, f.p.nodes[id], f.now)
		}
		f.idx = routing.NewIndex(all)
	}
	return f.idx.Alternative(r)
}

// Record does nothing: the platform records closures and reliance in its
// own data after Plan returns (carryOut), and ReliedOn answers from the
// routes' ReliedOn.
func (f *fleetIndex) Record(time.Time, routing.Action) {}

func (f *fleetIndex) ReliedOn(r routing.Route) time.Time {
	if n := f.p.nodes[r.Node]; n != nil && n.Routes[r.ID] != nil {
		return n.Routes[r.ID].ReliedOn
	}
	return time.Time{}
}

var (
	_ routing.Alternatives = (*fleetIndex)(nil)
	_ routing.Alternatives = (*pgAlternatives)(nil)
)

// remove records a closure in the index, if it was built.
func (f *fleetIndex) remove(r routing.Route) {
	if f != nil && f.idx != nil {
		f.idx.Remove(r)
	}
}

// openRequest asks for a new route through a node.
type openRequest struct {
	Node string       `json:"node"`
	User string       `json:"user"`
	Key  string       `json:"key"`
	Kind routing.Kind `json:"kind,omitempty"` // default own
}

// admitError says why a node took nobody new.
type admitError struct{ answer admitAnswer }

func (e admitError) Error() string {
	return fmt.Sprintf("node %s takes nobody new: %v", e.answer.Node, e.answer.Why)
}
func (e admitError) Unwrap() error { return store.ErrNotAdmit }

// trafficRequest records traffic a route carried.
type trafficRequest struct {
	Route string `json:"route"`
	Bytes uint64 `json:"bytes"`
}

// Update runs fn on node id under the store's lock and saves what it
// changed; on an error from fn or the save, the node goes back to what
// its file holds.
func (p *platform) Update(_ context.Context, id string, fn func(n *store.Node, now time.Time, tx store.NodeTx) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nodes[id]
	if n == nil {
		return fmt.Errorf("node %q: %w", id, store.ErrUnknownNode)
	}
	n.ClearChange()
	now := p.Now()
	if err := fn(n, now, &fileTx{p: p, now: now}); err != nil {
		p.revert(n)
		return err
	}
	if err := p.save(n); err != nil {
		p.revert(n)
		return err
	}
	return nil
}

// Read runs fn on node id under the store's lock.
func (p *platform) Read(_ context.Context, id string, history bool, fn func(n *store.Node, now time.Time) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nodes[id]
	if n == nil {
		return fmt.Errorf("node %q: %w", id, store.ErrUnknownNode)
	}
	return fn(n, p.Now())
}

// RouteNode is the node holding live route id.
func (p *platform) RouteNode(_ context.Context, id string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for nid, n := range p.nodes {
		if n.Routes[id] != nil {
			return nid, nil
		}
	}
	return "", store.ErrUnknown
}

// NodeIDs is every node's id, sorted.
func (p *platform) NodeIDs(context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ids(), nil
}

// fileTx is the file store's NodeTx: the store's lock is held, and a
// plan's alternatives are the round's one index of the route table.
type fileTx struct {
	p   *platform
	now time.Time
	idx *fleetIndex // built at the first plan that asks
}

func (t *fileTx) RouteTaken(id string) (bool, error) { return t.p.routeExists(id), nil }

// Alternatives: the file store holds every route in memory.
func (t *fileTx) Alternatives(*store.Node, time.Time) (routing.Alternatives, error) {
	if t.idx == nil {
		t.idx = &fleetIndex{p: t.p, now: t.now}
	}
	return t.idx, nil
}

func (t *fileTx) Failed() error { return nil }

// routeExists reports whether any node holds a route with this ID.
func (p *platform) routeExists(id string) bool {
	for _, n := range p.nodes {
		if n.Routes[id] != nil {
			return true
		}
	}
	return false
}

// priceRequest changes a node's asking price.
type priceRequest struct {
	Node  string        `json:"node"`
	Price pricing.Price `json:"price"`
}

// nodeView is what /nodes shows of a node.
type nodeView struct {
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

// EachNode runs fn on the nodes whose ids sort after after, at most
// limit of them (0: all), by id (NodeStore.EachNode).
func (p *platform) EachNode(_ context.Context, after string, limit int, fn func(id string, n *store.Node, now time.Time, err error)) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.Now()
	ids := p.ids()
	ids = ids[sortSearch(ids, after):]
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	for _, id := range ids {
		fn(id, p.nodes[id], now, nil)
	}
	last := ""
	if len(ids) > 0 {
		last = ids[len(ids)-1]
	}
	return last, nil
}

// sortSearch returns the index of the first of the sorted ids after after.
func sortSearch(ids []string, after string) int {
	i, found := slices.BinarySearch(ids, after)
	if found {
		i++
	}
	return i
}

// marshalView is v in JSON, or, if it cannot be, {"id","error"}.
func marshalView(id string, v nodeView) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"id": id, "error": fmt.Sprintf("node %s cannot be shown: %v", id, err)})
	}
	return b
}

// Events pages through node id's events (the tracker keeps the newest
// MaxEvents; the PostgreSQL store keeps every one): those after the
// after-th, at most limit.
func (p *platform) Events(_ context.Context, id string, after int64, limit int) (store.EventPage, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nodes[id]
	if n == nil {
		return store.EventPage{}, fmt.Errorf("events of node %q: %w", id, store.ErrUnknownNode)
	}
	page := store.EventPage{Node: id, Events: []store.NumberedEvent{}}
	for _, e := range eventList(n) {
		if e.ID <= after {
			continue
		}
		if limit > 0 && len(page.Events) == limit {
			page.Next = page.Events[len(page.Events)-1].ID
			break
		}
		page.Events = append(page.Events, e)
	}
	return page, nil
}

// eventList is n's event list, oldest first: the tracker's overload
// starts and ends and the platform's own events (marks), each numbered
// by its place among every event the node had, so a page's cursor stays
// valid as old ones fall off. A mark carries its number; the tracker's
// events take the numbers up to EventsSeen that the marks left, newest
// last.
func eventList(n *store.Node) []store.NumberedEvent {
	evs := n.Tracker.Events()
	out := make([]store.NumberedEvent, 0, len(evs)+len(n.Marks))
	taken := make(map[int64]bool, len(n.Marks))
	for _, m := range n.Marks {
		taken[m.ID] = true
	}
	num := n.EventsSeen
	for i := len(evs) - 1; i >= 0; i-- {
		for taken[num] {
			num--
		}
		out = append(out, store.NumberedEvent{ID: num, Event: evs[i]})
		num--
	}
	out = append(out, n.Marks...)
	slices.SortFunc(out, func(a, b store.NumberedEvent) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func (p *fleet) viewLocked(n *store.Node, now time.Time) nodeView {
	ok, why, admitErr := p.Config.Policy.Admit(n.Info, now)
	v := nodeView{
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
	for _, e := range eventList(n) {
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

// Notices returns the notices whose id is above after, by id (the order
// they were saved in), at most limit of them (0: all), and the last one's
// id (after, when there is none).
func (p *platform) Notices(_ context.Context, after int64, limit int) ([]store.NumberedNotice, int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []store.NumberedNotice{}
	for _, n := range p.nodes {
		for _, nn := range n.Notices {
			if nn.ID > after {
				out = append(out, nn)
			}
		}
	}
	slices.SortFunc(out, func(a, b store.NumberedNotice) int { return cmp.Compare(a.ID, b.ID) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	last := after
	if len(out) > 0 {
		last = out[len(out)-1].ID
	}
	return out, last, nil
}

// Plans returns each node's latest plan that closed something, by node,
// of the nodes whose ids sort after after, at most limit of them (0: all),
// and the last one's node id.
func (p *platform) Plans(_ context.Context, after string, limit int) ([]routing.Plan, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []routing.Plan{}
	ids := p.ids()
	last := ""
	for _, id := range ids[sortSearch(ids, after):] {
		if limit > 0 && len(out) == limit {
			break
		}
		if lp := p.nodes[id].LastPlan; lp != nil {
			out = append(out, *lp)
			last = id
		}
	}
	return out, last, nil
}
