package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/proofkit/nodekit/internal/procfile"
	"github.com/proofkit/nodekit/routing"
)

// SeedFile is the route table the platform starts from: nodes and their
// routes. Nodes the state directory already holds keep their state; the
// seed only adds nodes it does not hold (or registers a node that so far
// only reported).
type SeedFile struct {
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
func (s *SeedFile) UnmarshalJSON(b []byte) error {
	var f struct {
		Nodes  []seedNode      `json:"nodes"`
		Routes []routing.Route `json:"routes"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return err
	}
	*s = SeedFile{Routes: f.Routes}
	for _, n := range f.Nodes {
		s.Nodes = append(s.Nodes, n.Node)
		if n.Operator == "" {
			continue
		}
		if err := CheckOperator(n.Operator); err != nil {
			return fmt.Errorf("node %s: %w", n.ID, err)
		}
		if s.Operators == nil {
			s.Operators = map[string]string{}
		}
		s.Operators[n.ID] = n.Operator
	}
	return nil
}

// MaxSeedFile bounds the route table's file: a route is a line of about
// 150 bytes, so 1.5 million routes fit.
const MaxSeedFile = 256 << 20

// ReadSeed reads the route table file at path: a regular file of at most
// MaxSeedFile bytes, so that neither a FIFO (which would block the start,
// deaf to SIGTERM, until a writer came) nor a device is read.
func ReadSeed(path string) (*SeedFile, error) {
	b, _, err := procfile.Read(context.Background(), path, MaxSeedFile)
	if err != nil {
		return nil, fmt.Errorf("route table: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s SeedFile
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("route table %s: %w", path, err)
	}
	return &s, nil
}

// CheckSeed checks the seed's nodes and routes as a whole and returns the
// routes by node.
func CheckSeed(s *SeedFile) (map[string][]routing.Route, error) {
	byNode := map[string][]routing.Route{}
	seen := map[string]bool{}
	for _, r := range s.Routes {
		if r.ID == "" || seen[r.ID] {
			return nil, fmt.Errorf("route table: route %q: empty or listed twice: %w", r.ID, ErrBadInput)
		}
		seen[r.ID] = true
		byNode[r.Node] = append(byNode[r.Node], r)
	}
	known := map[string]bool{}
	for _, sn := range s.Nodes {
		if err := CheckNodeID(sn.ID); err != nil {
			return nil, fmt.Errorf("route table: %w", err)
		}
		if known[sn.ID] {
			return nil, fmt.Errorf("route table: node %s listed twice: %w", sn.ID, ErrBadInput)
		}
		known[sn.ID] = true
		if sn.Role != routing.RoleEntry && sn.Role != routing.RoleExit {
			return nil, fmt.Errorf("route table: node %s: role must be entry or exit: %w", sn.ID, ErrBadInput)
		}
		if sn.Price < 0 {
			return nil, fmt.Errorf("route table: node %s: negative price: %w", sn.ID, ErrBadInput)
		}
	}
	for id := range byNode {
		if !known[id] {
			return nil, fmt.Errorf("route table: routes of node %q, which it does not list: %w", id, ErrBadInput)
		}
	}
	return byNode, nil
}

// SeedNode registers n as the seed lists it, with its routes.
func (p *Rules) SeedNode(n *Node, sn routing.Node, routes []routing.Route, now time.Time) error {
	n.Info.Role, n.Info.Country, n.Info.Paused, n.Info.MaxUsers = sn.Role, sn.Country, sn.Paused, sn.MaxUsers
	n.Info.Price = sn.Price
	from := now
	for _, r := range routes {
		if r.Start.IsZero() {
			return fmt.Errorf("route table: route %s: no start: %w", r.ID, ErrBadInput)
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
			return fmt.Errorf("route table: route %s: country %q, but node %s is in %q: %w", r.ID, r.Country, sn.ID, sn.Country, ErrBadInput)
		}
		if r.Kind == 0 {
			r.Kind = routing.KindOwn
		}
		if r.User == "" || r.Key == "" {
			return fmt.Errorf("route table: route %s: user and key are required: %w", r.ID, ErrBadInput)
		}
		sess, err := n.Prices.Lock(r.Start)
		if err != nil {
			return fmt.Errorf("route table: route %s: %w", r.ID, err)
		}
		r.Price = sess.Locked
		n.Routes[r.ID] = &Route{Route: r, Session: sess}
	}
	n.Info.LiveUsers = LiveUsers(n)
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
