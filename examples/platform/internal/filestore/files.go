package filestore

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
	"github.com/proofkit/nodekit/internal/procfile"
)

func (p *Store) path(id string) string {
	return filepath.Join(p.Config.StateDir, id+".json")
}

// save writes n's file if it changed, atomically (internal/atomicfile):
// a reader, or a crash, sees the old file or the new one, never half of
// one. An error wraps ErrUnsaved.
func (p *Store) save(n *store.Node) error {
	b, err := store.EncodeNode(n, true)
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

// revert puts n back as its file holds it, after a change that could not
// be saved: memory never holds what the disk does not, so one node whose
// state cannot be saved fails its own requests and nothing else (a node
// never saved is forgotten).
func (p *Store) revert(n *store.Node) {
	id := n.Info.ID
	if n.SavedBytes == nil {
		delete(p.nodes, id)
		return
	}
	old, err := p.DecodeNode(n.SavedBytes)
	if err != nil { // it was written by save: cannot happen, but say so
		p.Log.Error("node state: the saved copy does not read back", "node", id, "err", err)
		delete(p.nodes, id)
		return
	}
	old.SavedBytes = n.SavedBytes
	p.nodes[id] = old
}

// load reads every node file in the state directory, creating it if
// missing. A file that cannot be read back stops the start: losing a
// node's state silently is what the directory is there to prevent.
func (p *Store) load() error {
	if p.Config.StateDir == "" {
		return errors.New("state directory: none given")
	}
	if err := os.MkdirAll(p.Config.StateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	names, err := filepath.Glob(filepath.Join(p.Config.StateDir, "*.json"))
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	for _, name := range names {
		b, err := readState(name)
		if err != nil {
			return fmt.Errorf("load %s: %w", name, err)
		}
		n, err := p.DecodeNode(b)
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
		p.Log.Info("state loaded", "dir", p.Config.StateDir, "nodes", len(names))
	}
	return nil
}

// numberNotices sets lastNotice to the highest id the files hold, and
// numbers the notices of files written before notices had ids after it,
// by time and then node (their order before ids); Open then saves
// them with their ids.
func (p *Store) numberNotices() {
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

// applySeed adds the seed's nodes and routes. Each node's price history
// starts with its seed price at its oldest route's start (or now), and
// each route's session locks it at the route's start.
func (p *Store) applySeed(s *store.SeedFile, now time.Time) error {
	byNode, err := store.CheckSeed(s)
	if err != nil {
		return err
	}
	for _, sn := range s.Nodes {
		n := p.nodes[sn.ID]
		if n != nil && n.Info.Role != 0 {
			continue // the state directory holds it: state wins
		}
		if n == nil {
			if n, err = p.NewNode(sn.ID); err != nil {
				return err
			}
		}
		if err := p.SeedNode(n, sn, byNode[sn.ID], now); err != nil {
			return err
		}
		p.nodes[sn.ID] = n
	}
	return nil
}

// maxStateFile bounds each file the store reads back at start: far above
// a node of 100,000 routes (about 30 MB), and below what a file filled
// by mistake would cost in memory.
const maxStateFile = 1 << 30

// readState reads a file of the state directory: a regular file of at
// most maxStateFile bytes, so that a FIFO (whose open blocks until a
// writer comes, deaf to SIGTERM) or a device (/dev/zero never ends) is
// refused at once, naming it.
func readState(path string) ([]byte, error) {
	b, _, err := procfile.Read(context.Background(), path, maxStateFile)
	return b, err
}

// operatorsFile holds the operators' own receivers in the state
// directory: a JSON object by operator (not *.json, which is a node's).
const operatorsFile = "operators.state"

// loadOperators reads operatorsFile, if there is one.
func (p *Store) loadOperators() error {
	p.operators = map[string]store.OperatorReceiver{}
	b, err := readState(filepath.Join(p.Config.StateDir, operatorsFile))
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
func (p *Store) OperatorReceivers(context.Context) (map[string]store.OperatorReceiver, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.operators), nil
}

// OperatorReceiver is operator's receiver; false when they have none
// (ReceiverStore).
func (p *Store) OperatorReceiver(_ context.Context, operator string) (store.OperatorReceiver, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.operators[operator]
	return r, ok, nil
}

// UpdateReceiver runs fn on operator's receiver under the store's lock,
// and writes operatorsFile, atomically, when fn changed it.
func (p *Store) UpdateReceiver(_ context.Context, operator string, fn func(r *store.OperatorReceiver, now time.Time) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.operators[operator]
	r.Secrets = slices.Clone(r.Secrets)
	if err := fn(&r, p.Now()); err != nil {
		return err
	}
	next := maps.Clone(p.operators)
	next[operator] = r
	b, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return fmt.Errorf("operators' receivers: %w: %w", store.ErrUnsaved, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(p.Config.StateDir, operatorsFile), b, 0o600); err != nil {
		return fmt.Errorf("operators' receivers: %w: %w", store.ErrUnsaved, err)
	}
	p.operators = next
	return nil
}
