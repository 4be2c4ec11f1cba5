package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/atomicfile"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// fileVersion is the version of a node file's layout.
const fileVersion = 1

// nodeFile is one node's file in the state directory: <id>.json.
type nodeFile struct {
	V             int                   `json:"v"`
	ID            string                `json:"id"`
	Role          string                `json:"role,omitempty"` // "" while not registered
	Country       string                `json:"country,omitempty"`
	Paused        bool                  `json:"paused,omitempty"`
	MaxUsers      int                   `json:"max_users,omitempty"`
	MemoryPercent float64               `json:"memory_percent"`
	OverloadEnded time.Time             `json:"overload_ended,omitzero"`
	Started       time.Time             `json:"overload_started,omitzero"` // the overload's start by the platform's clock
	PlanState     routing.NodeState     `json:"plan_state"`
	Tracker       json.RawMessage       `json:"tracker"`
	Prices        json.RawMessage       `json:"prices"`
	Routes        []store.Route         `json:"routes"`
	Closed        []store.ClosedRoute   `json:"closed,omitempty"`
	Notices       []overload.Notice     `json:"notices,omitempty"`
	NoticeIDs     []int64               `json:"notice_ids,omitempty"` // Notices' ids, in order; a file written before ids has none
	LastPlan      *routing.Plan         `json:"last_plan,omitempty"`
	NextRoute     int                   `json:"next_route"`
	Readings      int64                 `json:"readings,omitempty"`
	EventsSeen    int64                 `json:"events_seen,omitempty"`
	Marks         []store.NumberedEvent `json:"marks,omitempty"` // the platform's own events
}

func (p *platform) path(id string) string {
	return filepath.Join(p.cfg.StateDir, id+".json")
}

// save writes n's file if it changed, atomically (internal/atomicfile):
// a reader, or a crash, sees the old file or the new one, never half of
// one. An error wraps ErrUnsaved.
func (p *platform) save(n *store.Node) error {
	b, err := encodeNode(n, true)
	if err != nil {
		return err
	}
	if bytes.Equal(b, n.SavedBytes) {
		return nil
	}
	if err := atomicfile.WriteFile(p.path(n.Info.ID), b, 0o600); err != nil {
		return fmt.Errorf("save node %s: %w: %w", n.Info.ID, store.ErrUnsaved, err)
	}
	n.SavedBytes = b
	return nil
}

// encodeNode is n as a node file; with full false, without its routes,
// closures and notices (the PostgreSQL store keeps those in tables). An
// error wraps ErrUnsaved.
func encodeNode(n *store.Node, full bool) ([]byte, error) {
	f := nodeFile{
		V: fileVersion, ID: n.Info.ID, Country: n.Info.Country, Paused: n.Info.Paused,
		MaxUsers: n.Info.MaxUsers, MemoryPercent: n.Info.MemoryPercent, OverloadEnded: n.Info.OverloadEnded, Started: n.StartedAt,
		PlanState: n.Info.State, LastPlan: n.LastPlan,
		NextRoute: n.NextRoute, Routes: []store.Route{}, Readings: n.Readings, EventsSeen: n.EventsSeen, Marks: n.Marks,
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
		return nil, fmt.Errorf("save node %s: tracker: %w: %w", n.Info.ID, store.ErrUnsaved, err)
	}
	if f.Prices, err = json.Marshal(n.Prices); err != nil {
		return nil, fmt.Errorf("save node %s: prices: %w: %w", n.Info.ID, store.ErrUnsaved, err)
	}
	var b []byte
	if full {
		b, err = json.MarshalIndent(f, "", "  ")
	} else {
		b, err = json.Marshal(f)
	}
	if err != nil {
		return nil, fmt.Errorf("save node %s: %w: %w", n.Info.ID, store.ErrUnsaved, err)
	}
	return b, nil
}

// revert puts n back as its file holds it, after a change that could not
// be saved: memory never holds what the disk does not, so one node whose
// state cannot be saved fails its own requests and nothing else (a node
// never saved is forgotten).
func (p *platform) revert(n *store.Node) {
	id := n.Info.ID
	if n.SavedBytes == nil {
		delete(p.nodes, id)
		return
	}
	old, err := p.decodeNode(n.SavedBytes)
	if err != nil { // it was written by save: cannot happen, but say so
		p.log.Error("node state: the saved copy does not read back", "node", id, "err", err)
		delete(p.nodes, id)
		return
	}
	old.SavedBytes = n.SavedBytes
	p.nodes[id] = old
}

// load reads every node file in the state directory, creating it if
// missing. A file that cannot be read back stops the start: losing a
// node's state silently is what the directory is there to prevent.
func (p *platform) load() error {
	if p.cfg.StateDir == "" {
		return errors.New("state directory: none given")
	}
	if err := os.MkdirAll(p.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	names, err := filepath.Glob(filepath.Join(p.cfg.StateDir, "*.json"))
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			return fmt.Errorf("load %s: %w", name, err)
		}
		n, err := p.decodeNode(b)
		if err != nil {
			return fmt.Errorf("load %s: %w", name, err)
		}
		if want := strings.TrimSuffix(filepath.Base(name), ".json"); n.Info.ID != want {
			return fmt.Errorf("load %s: holds node %q", name, n.Info.ID)
		}
		n.SavedBytes = b
		p.nodes[n.Info.ID] = n
	}
	p.numberNotices()
	if len(names) > 0 {
		p.log.Info("state loaded", "dir", p.cfg.StateDir, "nodes", len(names))
	}
	return nil
}

// numberNotices sets lastNotice to the highest id the files hold, and
// numbers the notices of files written before notices had ids after it,
// by time and then node (their order before ids); newPlatform then saves
// them with their ids.
func (p *platform) numberNotices() {
	var unnumbered []*store.NumberedNotice
	for _, n := range p.nodes {
		for i := range n.Notices {
			if nn := &n.Notices[i]; nn.ID == 0 {
				unnumbered = append(unnumbered, nn)
			} else {
				p.lastNotice = max(p.lastNotice, nn.ID)
			}
		}
	}
	slices.SortFunc(unnumbered, func(a, b *store.NumberedNotice) int {
		return cmp.Or(a.At.Compare(b.At), strings.Compare(a.Node, b.Node))
	})
	for _, nn := range unnumbered {
		p.lastNotice++
		nn.ID = p.lastNotice
	}
}

func (p *rules) decodeNode(b []byte) (*store.Node, error) {
	var f nodeFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	if f.V != fileVersion {
		return nil, fmt.Errorf("version %d: want %d", f.V, fileVersion)
	}
	if err := store.CheckNodeID(f.ID); err != nil {
		return nil, err
	}
	tr, err := overload.RestoreTracker(f.Tracker, p.cfg.Limits)
	if err != nil {
		return nil, fmt.Errorf("tracker: %w", err)
	}
	h, err := pricing.NewHistory(p.cfg.Prices)
	if err != nil {
		return nil, err
	}
	if err := h.UnmarshalJSON(f.Prices); err != nil {
		return nil, fmt.Errorf("prices: %w", err)
	}
	n := &store.Node{
		Info: routing.Node{
			ID: f.ID, Country: f.Country, Paused: f.Paused, MaxUsers: f.MaxUsers,
			MemoryPercent: f.MemoryPercent, OverloadedSince: tr.Since(), OverloadEnded: f.OverloadEnded,
			State: f.PlanState,
		},
		Tracker: tr, Prices: h, Routes: map[string]*store.Route{},
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
		nn := store.NumberedNotice{Notice: nt} // ID 0: numbered by load
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
	n.Info.LiveUsers = store.LiveUsers(n)
	return n, nil
}

// seedFile is the route table the platform starts from: nodes and their
// routes. Nodes the state directory already holds keep their state; the
// seed only adds nodes it does not hold (or registers a node that so far
// only reported).
type seedFile struct {
	Nodes  []routing.Node  `json:"nodes"`
	Routes []routing.Route `json:"routes"`
	// Operators is each node's operator, by node, as a node's
	// "operator" names it in the file.
	Operators map[string]string `json:"-"`
}

// seedNode is a node of the route table's file: routing's node, and who
// runs it.
type seedNode struct {
	routing.Node
	Operator string `json:"operator,omitempty"`
}

// UnmarshalJSON reads the route table, every node's "operator" beside
// its routing fields; an unknown field is an error.
func (s *seedFile) UnmarshalJSON(b []byte) error {
	var f struct {
		Nodes  []seedNode      `json:"nodes"`
		Routes []routing.Route `json:"routes"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return err
	}
	*s = seedFile{Routes: f.Routes}
	for _, n := range f.Nodes {
		s.Nodes = append(s.Nodes, n.Node)
		if n.Operator == "" {
			continue
		}
		if err := checkOperator(n.Operator); err != nil {
			return fmt.Errorf("node %s: %w", n.ID, err)
		}
		if s.Operators == nil {
			s.Operators = map[string]string{}
		}
		s.Operators[n.ID] = n.Operator
	}
	return nil
}

func readSeed(path string) (*seedFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("route table: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s seedFile
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("route table %s: %w", path, err)
	}
	return &s, nil
}

// applySeed adds the seed's nodes and routes. Each node's price history
// starts with its seed price at its oldest route's start (or now), and
// each route's session locks it at the route's start.
func (p *platform) applySeed(s *seedFile, now time.Time) error {
	byNode, err := checkSeed(s)
	if err != nil {
		return err
	}
	for _, sn := range s.Nodes {
		n := p.nodes[sn.ID]
		if n != nil && n.Info.Role != 0 {
			continue // the state directory holds it: state wins
		}
		if n == nil {
			if n, err = p.newNode(sn.ID); err != nil {
				return err
			}
		}
		if err := p.seedNode(n, sn, byNode[sn.ID], now); err != nil {
			return err
		}
		p.nodes[sn.ID] = n
	}
	return nil
}

// checkSeed checks the seed's nodes and routes as a whole and returns the
// routes by node.
func checkSeed(s *seedFile) (map[string][]routing.Route, error) {
	byNode := map[string][]routing.Route{}
	seen := map[string]bool{}
	for _, r := range s.Routes {
		if r.ID == "" || seen[r.ID] {
			return nil, fmt.Errorf("route table: route %q: empty or listed twice: %w", r.ID, store.ErrBadInput)
		}
		seen[r.ID] = true
		byNode[r.Node] = append(byNode[r.Node], r)
	}
	known := map[string]bool{}
	for _, sn := range s.Nodes {
		if err := store.CheckNodeID(sn.ID); err != nil {
			return nil, fmt.Errorf("route table: %w", err)
		}
		if known[sn.ID] {
			return nil, fmt.Errorf("route table: node %s listed twice: %w", sn.ID, store.ErrBadInput)
		}
		known[sn.ID] = true
		if sn.Role != routing.RoleEntry && sn.Role != routing.RoleExit {
			return nil, fmt.Errorf("route table: node %s: role must be entry or exit: %w", sn.ID, store.ErrBadInput)
		}
		if sn.Price < 0 {
			return nil, fmt.Errorf("route table: node %s: negative price: %w", sn.ID, store.ErrBadInput)
		}
	}
	for id := range byNode {
		if !known[id] {
			return nil, fmt.Errorf("route table: routes of node %q, which it does not list: %w", id, store.ErrBadInput)
		}
	}
	return byNode, nil
}

// seedNode registers n as the seed lists it, with its routes.
func (p *rules) seedNode(n *store.Node, sn routing.Node, routes []routing.Route, now time.Time) error {
	n.Info.Role, n.Info.Country, n.Info.Paused, n.Info.MaxUsers = sn.Role, sn.Country, sn.Paused, sn.MaxUsers
	n.Info.Price = sn.Price
	from := now
	for _, r := range routes {
		if r.Start.IsZero() {
			return fmt.Errorf("route table: route %s: no start: %w", r.ID, store.ErrBadInput)
		}
		from = minTime(from, r.Start)
	}
	if ch := n.Prices.Changes(); len(ch) == 0 {
		if err := n.Prices.Set(from, sn.Price); err != nil {
			return fmt.Errorf("route table: node %s: %w", sn.ID, err)
		}
	}
	for _, r := range routes {
		if r.Country == "" {
			r.Country = sn.Country
		}
		if r.Country != sn.Country {
			return fmt.Errorf("route table: route %s: country %q, but node %s is in %q: %w", r.ID, r.Country, sn.ID, sn.Country, store.ErrBadInput)
		}
		if r.Kind == 0 {
			r.Kind = routing.KindOwn
		}
		if r.User == "" || r.Key == "" {
			return fmt.Errorf("route table: route %s: user and key are required: %w", r.ID, store.ErrBadInput)
		}
		sess, err := n.Prices.Lock(r.Start)
		if err != nil {
			return fmt.Errorf("route table: route %s: %w", r.ID, err)
		}
		r.Price = sess.Locked
		n.Routes[r.ID] = &store.Route{Route: r, Session: sess}
	}
	n.Info.LiveUsers = store.LiveUsers(n)
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// operatorsFile holds the operators' own receivers in the state
// directory: a JSON object by operator (not *.json, which is a node's).
const operatorsFile = "operators.state"

// loadOperators reads operatorsFile, if there is one.
func (p *platform) loadOperators() error {
	p.operators = map[string]store.OperatorReceiver{}
	b, err := os.ReadFile(filepath.Join(p.cfg.StateDir, operatorsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("operators' receivers: %w", err)
	}
	if err := json.Unmarshal(b, &p.operators); err != nil {
		return fmt.Errorf("operators' receivers: %s: %w", operatorsFile, err)
	}
	return nil
}

// OperatorReceivers is every operator's receiver (ReceiverStore).
func (p *platform) OperatorReceivers(context.Context) (map[string]store.OperatorReceiver, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.operators), nil
}

// UpdateReceiver runs fn on operator's receiver under the store's lock,
// and writes operatorsFile, atomically, when fn changed it.
func (p *platform) UpdateReceiver(_ context.Context, operator string, fn func(r *store.OperatorReceiver, now time.Time) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.operators[operator]
	r.Secrets = slices.Clone(r.Secrets)
	if err := fn(&r, p.now()); err != nil {
		return err
	}
	next := maps.Clone(p.operators)
	next[operator] = r
	b, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return fmt.Errorf("operators' receivers: %w: %w", store.ErrUnsaved, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(p.cfg.StateDir, operatorsFile), b, 0o600); err != nil {
		return fmt.Errorf("operators' receivers: %w: %w", store.ErrUnsaved, err)
	}
	p.operators = next
	return nil
}
