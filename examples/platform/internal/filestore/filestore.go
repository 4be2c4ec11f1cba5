package filestore

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// Store keeps one node record per node, behind one lock: every request
// and plan round runs under it, and every change is written to the node's
// file before the lock is released, so what a client was told is on disk.
type Store struct {
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

var _ store.Store = (*Store)(nil)

// Open validates cfg, loads the state directory and then the seed
// (nodes and routes the state does not hold yet).
func Open(cfg store.Config, seed *store.SeedFile) (*Store, error) {
	c, err := store.NewRules(cfg)
	if err != nil {
		return nil, err
	}
	p := &Store{Rules: c, nodes: map[string]*store.Node{}}
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

// Close closes the store's files (its outbox's log); the store is not
// used after.
func (p *Store) Close() error {
	if p.box == nil {
		return nil
	}
	return p.box.close()
}

// ids returns the node IDs in order, so rounds and listings are stable.
func (p *Store) ids() []string {
	return slices.Sorted(maps.Keys(p.nodes))
}

// Report takes a reading of node id (NodeStore.Report), under the
// store's one lock: the node, created if new, is written once, after
// run's Take and Plan, with the outbox entries of its notice before it. A node
// whose state cannot be saved gets ErrUnsaved, and its record goes back
// to what is on disk: the next request sees what the last answered one
// left.
func (p *Store) Report(_ context.Context, id string, run store.ReportRun) (*overload.Notice, error) {
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
	if err := run.Take(n, now); err != nil {
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
	if err := run.Plan(n, now, &fileTx{p: p, now: now}); err != nil {
		p.revert(n)
		p.dropDecided(added)
		return nil, err
	}
	if err := p.save(n); err != nil {
		p.revert(n)
		p.dropDecided(added)
		return nil, err
	}
	run.Kept(n.Notice)
	p.carryOut(n, now, nil)
	return n.Notice, nil
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
func (p *Store) PlanDue(_ context.Context, plan store.PlanFunc) error {
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
func (p *Store) carryOut(n *store.Node, now time.Time, idx *fleetIndex) {
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

// fleetIndex is the index of the whole route table, each route at its
// session's price at now, for one plan round. It is built when a plan
// first asks for an alternative: only a node moving routes in use asks, so
// a report from a quiet node prices its own routes, not the fleet's. Built
// mid-round, it holds no route the round closed already.
type fleetIndex struct {
	p   *Store
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

var _ routing.Alternatives = (*fleetIndex)(nil)

// remove records a closure in the index, if it was built.
func (f *fleetIndex) remove(r routing.Route) {
	if f != nil && f.idx != nil {
		f.idx.Remove(r)
	}
}

// Update runs fn on node id under the store's lock and saves what it
// changed; on an error from fn or the save, the node goes back to what
// its file holds.
func (p *Store) Update(_ context.Context, id string, fn func(n *store.Node, now time.Time, tx store.NodeTx) error) error {
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
func (p *Store) Read(_ context.Context, id string, history bool, fn func(n *store.Node, now time.Time) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nodes[id]
	if n == nil {
		return fmt.Errorf("node %q: %w", id, store.ErrUnknownNode)
	}
	return fn(n, p.Now())
}

// RouteNode is the node holding live route id.
func (p *Store) RouteNode(_ context.Context, id string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if nid, ok := p.routeNode(id); ok {
		return nid, nil
	}
	return "", store.ErrUnknown
}

// NodeIDs is every node's id, sorted.
func (p *Store) NodeIDs(context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ids(), nil
}

// fileTx is the file store's NodeTx: the store's lock is held, and a
// plan's alternatives are the round's one index of the route table.
type fileTx struct {
	p   *Store
	now time.Time
	idx *fleetIndex // built at the first plan that asks
}

func (t *fileTx) RouteTaken(id string) (bool, error) {
	_, taken := t.p.routeNode(id)
	return taken, nil
}

// Alternatives: the file store holds every route in memory.
func (t *fileTx) Alternatives(*store.Node, time.Time) (routing.Alternatives, error) {
	if t.idx == nil {
		t.idx = &fleetIndex{p: t.p, now: t.now}
	}
	return t.idx, nil
}

func (t *fileTx) Failed() error { return nil }

// routeNode is the node holding live route id; false when none does.
// The caller holds p.mu.
func (p *Store) routeNode(id string) (string, bool) {
	for nid, n := range p.nodes {
		if n.Routes[id] != nil {
			return nid, true
		}
	}
	return "", false
}

// EachNode runs fn on the nodes whose ids sort after after, at most
// limit of them (0: all), by id (NodeStore.EachNode).
func (p *Store) EachNode(_ context.Context, after string, limit int, fn func(id string, n *store.Node, now time.Time, err error)) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.Now()
	ids := p.ids()
	ids = ids[store.IndexAfter(ids, after):]
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

// Events pages through node id's events (the tracker keeps the newest
// MaxEvents; the PostgreSQL store keeps every one): those after the
// after-th, at most limit.
func (p *Store) Events(_ context.Context, id string, after int64, limit int) (store.EventPage, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nodes[id]
	if n == nil {
		return store.EventPage{}, fmt.Errorf("events of node %q: %w", id, store.ErrUnknownNode)
	}
	page := store.EventPage{Node: id, Events: []store.NumberedEvent{}}
	for _, e := range store.EventList(n) {
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

// Notices returns the notices whose id is above after, by id (the order
// they were saved in), at most limit of them (0: all), and the last one's
// id (after, when there is none).
func (p *Store) Notices(_ context.Context, after int64, limit int) ([]store.NumberedNotice, int64, error) {
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
func (p *Store) Plans(_ context.Context, after string, limit int) ([]routing.Plan, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []routing.Plan{}
	ids := p.ids()
	last := ""
	for _, id := range ids[store.IndexAfter(ids, after):] {
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
