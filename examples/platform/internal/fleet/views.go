package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

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
