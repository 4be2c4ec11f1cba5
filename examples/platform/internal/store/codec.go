package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// FileVersion is the version of a node file's layout.
const FileVersion = 1

// NodeFile is one node's file in the state directory: <id>.json.
type NodeFile struct {
	V             int               `json:"v"`
	ID            string            `json:"id"`
	Role          string            `json:"role,omitempty"` // "" while not registered
	Country       string            `json:"country,omitempty"`
	Paused        bool              `json:"paused,omitempty"`
	MaxUsers      int               `json:"max_users,omitempty"`
	MemoryPercent float64           `json:"memory_percent"`
	OverloadEnded time.Time         `json:"overload_ended,omitzero"`
	Started       time.Time         `json:"overload_started,omitzero"` // the overload's start by the platform's clock
	PlanState     routing.NodeState `json:"plan_state"`
	Tracker       json.RawMessage   `json:"tracker"`
	Prices        json.RawMessage   `json:"prices"`
	Routes        []Route           `json:"routes"`
	Closed        []ClosedRoute     `json:"closed,omitempty"`
	Notices       []overload.Notice `json:"notices,omitempty"`
	NoticeIDs     []int64           `json:"notice_ids,omitempty"` // Notices' ids, in order; a file written before ids has none
	LastPlan      *routing.Plan     `json:"last_plan,omitempty"`
	NextRoute     int               `json:"next_route"`
	Readings      int64             `json:"readings,omitempty"`
	EventsSeen    int64             `json:"events_seen,omitempty"`
	Marks         []NumberedEvent   `json:"marks,omitempty"` // the platform's own events
}

// EncodeNode is n as a node file; with full false, without its routes,
// closures and notices (the PostgreSQL store keeps those in tables). An
// error wraps ErrUnsaved.
func EncodeNode(n *Node, full bool) ([]byte, error) {
	f := NodeFile{
		V: FileVersion, ID: n.Info.ID, Country: n.Info.Country, Paused: n.Info.Paused,
		MaxUsers: n.Info.MaxUsers, MemoryPercent: n.Info.MemoryPercent, OverloadEnded: n.Info.OverloadEnded, Started: n.StartedAt,
		PlanState: n.Info.State, LastPlan: n.LastPlan,
		NextRoute: n.NextRoute, Routes: []Route{}, Readings: n.Readings, EventsSeen: n.EventsSeen, Marks: n.Marks,
	}
	if full {
		f.Closed = n.Closed
		for _, nn := range n.Notices {
			f.Notices, f.NoticeIDs = append(f.Notices, nn.Notice), append(f.NoticeIDs, nn.ID)
		}
		for _, id := range slices.Sorted(maps.Keys(n.Routes)) {
			f.Routes = append(f.Routes, *n.Routes[id])
		}
	}
	if n.Info.Role != 0 {
		f.Role = n.Info.Role.String()
	}
	var err error
	if f.Tracker, err = json.Marshal(n.Tracker); err != nil {
		return nil, fmt.Errorf("save node %s: tracker: %w: %w", n.Info.ID, ErrUnsaved, err)
	}
	if f.Prices, err = json.Marshal(n.Prices); err != nil {
		return nil, fmt.Errorf("save node %s: prices: %w: %w", n.Info.ID, ErrUnsaved, err)
	}
	var b []byte
	if full {
		b, err = json.MarshalIndent(f, "", "  ")
	} else {
		b, err = json.Marshal(f)
	}
	if err != nil {
		return nil, fmt.Errorf("save node %s: %w: %w", n.Info.ID, ErrUnsaved, err)
	}
	return b, nil
}

// DecodeNode reads a node file (EncodeNode's), checking what it holds
// against the rules' limits and prices.
func (p *Rules) DecodeNode(b []byte) (*Node, error) {
	var f NodeFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	if f.V != FileVersion {
		return nil, fmt.Errorf("version %d: want %d", f.V, FileVersion)
	}
	if err := CheckNodeID(f.ID); err != nil {
		return nil, err
	}
	tr, err := overload.RestoreTracker(f.Tracker, p.Config.Limits)
	if err != nil {
		return nil, fmt.Errorf("tracker: %w", err)
	}
	h, err := pricing.NewHistory(p.Config.Prices)
	if err != nil {
		return nil, err
	}
	if err := h.UnmarshalJSON(f.Prices); err != nil {
		return nil, fmt.Errorf("prices: %w", err)
	}
	n := &Node{
		Info: routing.Node{
			ID: f.ID, Country: f.Country, Paused: f.Paused, MaxUsers: f.MaxUsers,
			MemoryPercent: f.MemoryPercent, OverloadedSince: tr.Since(), OverloadEnded: f.OverloadEnded,
			State: f.PlanState,
		},
		Tracker: tr, Prices: h, Routes: map[string]*Route{},
		Closed: f.Closed, LastPlan: f.LastPlan,
		NextRoute: f.NextRoute, Readings: f.Readings, EventsSeen: max(f.EventsSeen, int64(len(tr.Events())+len(f.Marks))), Marks: f.Marks,
	}
	if tr.Overloaded() && !f.Started.IsZero() {
		n.StartedAt, n.Info.OverloadedSince = f.Started, f.Started
	}
	if len(f.NoticeIDs) != 0 && len(f.NoticeIDs) != len(f.Notices) {
		return nil, fmt.Errorf("%d notice ids for %d notices", len(f.NoticeIDs), len(f.Notices))
	}
	for i, nt := range f.Notices {
		nn := NumberedNotice{Notice: nt} // ID 0: numbered by load
		if len(f.NoticeIDs) > 0 {
			nn.ID = f.NoticeIDs[i]
		}
		n.Notices = append(n.Notices, nn)
	}
	if f.Role != "" {
		if err := n.Info.Role.UnmarshalText([]byte(f.Role)); err != nil {
			return nil, err
		}
	}
	if ch := h.Changes(); len(ch) > 0 {
		n.Info.Price = ch[len(ch)-1].Price
	}
	for _, rt := range f.Routes {
		if rt.Route.Node != f.ID || rt.Route.ID == "" {
			return nil, fmt.Errorf("route %q: of node %q", rt.Route.ID, rt.Route.Node)
		}
		n.Routes[rt.Route.ID] = &rt
	}
	n.Info.LiveUsers = LiveUsers(n)
	return n, nil
}
