package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/routing"
)

// nodeCache is a replica's copy of the nodes it last wrote, each as it
// committed it, with the row's version then. It lets a report of a node
// that cannot be planned anything skip both reading its row and decoding
// its state: the report is decided on the copy and written by one
// statement, UPDATE … WHERE version = the copy's (reportQuick). A copy
// that is no longer the row (another replica, or a request of another
// kind, wrote the node since) changes nothing: the UPDATE finds no row,
// and the report is taken the usual way, the row locked and read.
//
// A copy is taken out while a report uses it, so two reports of one node
// on one replica never share it, and put back only once what was decided
// on it is committed.
type nodeCache struct {
	mu    sync.Mutex
	nodes map[string]cachedNode
	max   int // most nodes held; a node past it is not kept
	// taken counts the reports decided on a copy and written; reused
	// those taken the usual way that started from a copy, not from the
	// row's state decoded.
	taken, reused atomic.Int64
}

type cachedNode struct {
	version int64
	node    *store.Node
}

func newNodeCache(max int) *nodeCache {
	if max <= 0 {
		return nil
	}
	return &nodeCache{nodes: map[string]cachedNode{}, max: max}
}

// take removes node id's copy and returns it.
func (c *nodeCache) take(id string) (cachedNode, bool) {
	if c == nil {
		return cachedNode{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cn, ok := c.nodes[id]
	if ok {
		delete(c.nodes, id)
	}
	return cn, ok
}

// put keeps n, as committed at version, in place of any copy of it held,
// without its routes (a report decided on a copy never needs them).
func (c *nodeCache) put(n *store.Node, version int64) {
	if c == nil || n == nil {
		return
	}
	n.Routes, n.Closed, n.Info.LiveUsers = map[string]*store.Route{}, nil, 0
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.nodes[n.Info.ID]; ok && cur.version > version {
		return
	}
	if _, ok := c.nodes[n.Info.ID]; !ok && len(c.nodes) >= c.max {
		return
	}
	c.nodes[n.Info.ID] = cachedNode{version: version, node: n}
}

// keep puts the nodes a committed transaction wrote into the cache.
func (c *nodeCache) keep(nodes []*pgNode) {
	for _, n := range nodes {
		if n != nil && n.version > 0 {
			c.put(n.Node, n.version)
		}
	}
}

// quickReport is a report decided on a copy of its node, not yet written.
type quickReport struct {
	j       *reportJob
	n       *store.Node // the copy, changed by the report
	version int64       // the row's version the copy is of
}

// decideQuick decides the reports of jobs that a copy of their node
// decides alone: the node cached, one report of it among jobs, the
// reading counted with no event and no notice, and the node one that
// cannot be planned anything (quiet) after it. It returns those, by node
// ID, and the jobs it did not decide, to be taken the usual way.
//
// What the usual way would decide, a copy decides the same: the row at
// the copy's version is the state the usual way would read under the
// lock, and a quiet node's plan needs nothing beside its row (routing
// closes nothing on a node neither overloaded nor paused). A decision
// holds only if writeQuick finds the row still at that version.
func (p *Store) decideQuick(jobs []*reportJob) (qs []quickReport, rest []*reportJob) {
	if p.cache == nil {
		return nil, jobs
	}
	per := make(map[string]int, len(jobs))
	for _, j := range jobs {
		per[j.id]++
	}
	now := p.Now()
	for _, j := range jobs {
		if per[j.id] > 1 {
			rest = append(rest, j)
			continue
		}
		cn, ok := p.cache.take(j.id)
		if !ok {
			rest = append(rest, j)
			continue
		}
		// From here the copy may be changed: it is not put back unless
		// its row is written.
		cn.node.ClearChange()
		if err := j.run.Take(cn.node, now); err != nil {
			rest = append(rest, j)
			continue
		}
		// The usual way starts from the copy with the reading taken on
		// it if its row is still at its version (no one else wrote the
		// node since), and plans the node there: when the reading
		// started or ended an overload or sent a notice, or the plan
		// asks for the node's routes (it is not quiet), before it
		// changed anything.
		if cn.node.Event != nil || cn.node.Notice != nil {
			j.cached, j.taken = cn, true
			rest = append(rest, j)
			continue
		}
		err := j.run.Plan(cn.node, now, copyTx{})
		if errors.Is(err, errNeedsRow) {
			j.cached, j.taken = cn, true
			rest = append(rest, j)
			continue
		}
		if err != nil || len(cn.node.Closing) > 0 {
			rest = append(rest, j)
			continue
		}
		qs = append(qs, quickReport{j: j, n: cn.node, version: cn.version})
	}
	slices.SortFunc(qs, func(a, b quickReport) int { return strings.Compare(a.n.Info.ID, b.n.Info.ID) })
	return qs, rest
}

// errNeedsRow: a plan on a node's copy asked for what only its locked
// row gives (its routes); the report is taken the usual way.
var errNeedsRow = errors.New("the node's routes are needed")

// copyTx is the NodeTx of a report decided on a copy of its node, with
// no transaction: a plan that needs the node's routes is taken the usual
// way (errNeedsRow).
type copyTx struct{}

func (copyTx) RouteTaken(string) (bool, error) { return false, errNeedsRow }
func (copyTx) Alternatives(*store.Node, time.Time) (routing.Alternatives, error) {
	return nil, errNeedsRow
}
func (copyTx) Failed() error { return nil }

// querier runs a statement: the pool (a statement that is its own
// transaction) or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// writeQuick writes the rows of qs in one statement, each only if its
// version is still its copy's, and returns the new versions of those
// written, by node ID.
func writeQuick(ctx context.Context, db querier, qs []quickReport) (map[string]int64, error) {
	sql, args, err := quickUpdate(qs)
	if err != nil {
		return nil, err
	}
	return scanVersions(db.Query(ctx, sql, args...))
}

// quickUpdate is writeQuick's statement, with its arguments.
func quickUpdate(qs []quickReport) (string, []any, error) {
	ids, versions, states := make([]string, len(qs)), make([]int64, len(qs)), make([]string, len(qs))
	readings, overloaded := make([]int64, len(qs)), make([]bool, len(qs))
	for i, q := range qs {
		b, err := encodeState(q.n)
		if err != nil {
			return "", nil, err
		}
		ids[i], versions[i], states[i] = q.n.Info.ID, q.version, string(b)
		readings[i], overloaded[i] = q.n.Readings, q.n.Tracker.Overloaded()
	}
	return `UPDATE nodes AS n SET state = u.state::json, readings = u.readings, overloaded = u.overloaded,
			next_plan_at = NULL, version = n.version + 1, updated_at = now()
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::boolean[]) AS u (id, version, state, readings, overloaded)
		WHERE n.id = u.id AND n.version = u.version
		RETURNING n.id, n.version`, []any{ids, versions, states, readings, overloaded}, nil
}

// settleQuick answers the reports of qs whose rows were written, once
// committed, and keeps their copies; it returns the others' jobs, to be
// taken the usual way (their copies were stale).
func (p *Store) settleQuick(qs []quickReport, written map[string]int64) []*reportJob {
	var rest []*reportJob
	for _, q := range qs {
		v, ok := written[q.n.Info.ID]
		if !ok {
			rest = append(rest, q.j)
			continue
		}
		q.j.notice, q.j.err = nil, nil
		q.j.run.Kept(nil)
		p.cache.put(q.n, v)
		p.cache.taken.Add(1)
	}
	return rest
}

// reportQuick takes the reports of jobs decideQuick decides, written by
// one statement that is their transaction, and returns the jobs it did
// not take.
func (p *Store) reportQuick(ctx context.Context, jobs []*reportJob) []*reportJob {
	qs, rest := p.decideQuick(jobs)
	if len(qs) == 0 {
		return rest
	}
	return append(rest, p.commitQuick(ctx, qs)...)
}

// commitQuick writes qs by one statement that is their transaction and
// settles them; it returns the jobs to be taken the usual way.
func (p *Store) commitQuick(ctx context.Context, qs []quickReport) []*reportJob {
	written, err := writeQuick(ctx, p.db, qs)
	if err != nil {
		// Whether the statement committed is not known: the usual way
		// takes every report again (a counted one is then a duplicate).
		written = nil
	}
	return p.settleQuick(qs, written)
}

// encodeState is n's state column: what EncodeNode(n, false) holds, in
// the same JSON shape (DecodeNode reads both), built by hand: the
// tracker's and the prices' own encodings are copied in as they come,
// not parsed and compacted again by encoding/json, and the node's own
// fields are written without reflection. It runs on every report, and
// pays: BenchmarkStateCodec, side by side in one run, medians of 6, an
// overloaded node's state in 12 µs and 8 allocations by hand, against
// 98 µs and 9 allocations through encoding/json.
func encodeState(n *store.Node) ([]byte, error) {
	tr, err := n.Tracker.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("save node %s: tracker: %w: %w", n.Info.ID, store.ErrUnsaved, err)
	}
	pr, err := n.Prices.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("save node %s: prices: %w: %w", n.Info.ID, store.ErrUnsaved, err)
	}
	ps, err := json.Marshal(n.Info.State)
	if err != nil {
		return nil, fmt.Errorf("save node %s: plan state: %w: %w", n.Info.ID, store.ErrUnsaved, err)
	}
	var lp []byte
	if n.LastPlan != nil {
		if lp, err = json.Marshal(n.LastPlan); err != nil {
			return nil, fmt.Errorf("save node %s: last plan: %w: %w", n.Info.ID, store.ErrUnsaved, err)
		}
	}
	b := make([]byte, 0, len(tr)+len(pr)+len(ps)+len(lp)+256)
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, store.FileVersion, 10)
	b = append(b, `,"id":`...)
	b = appendJSONString(b, n.Info.ID)
	if n.Info.Role != 0 {
		b = append(b, `,"role":`...)
		b = appendJSONString(b, n.Info.Role.String())
	}
	if n.Info.Country != "" {
		b = append(b, `,"country":`...)
		b = appendJSONString(b, n.Info.Country)
	}
	if n.Info.Paused {
		b = append(b, `,"paused":true`...)
	}
	if n.Info.MaxUsers != 0 {
		b = append(b, `,"max_users":`...)
		b = strconv.AppendInt(b, int64(n.Info.MaxUsers), 10)
	}
	m := n.Info.MemoryPercent
	if math.IsNaN(m) || math.IsInf(m, 0) {
		return nil, fmt.Errorf("save node %s: memory %v: %w", n.Info.ID, m, store.ErrUnsaved)
	}
	b = append(b, `,"memory_percent":`...)
	b = strconv.AppendFloat(b, m, 'g', -1, 64)
	for _, t := range []struct {
		name string
		at   time.Time
	}{{"overload_ended", n.Info.OverloadEnded}, {"overload_started", n.StartedAt}} {
		if t.at.IsZero() {
			continue
		}
		tb, err := t.at.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("save node %s: %s: %w: %w", n.Info.ID, t.name, store.ErrUnsaved, err)
		}
		b = append(b, `,"`...)
		b = append(b, t.name...)
		b = append(b, `":`...)
		b = append(b, tb...)
	}
	b = append(b, `,"plan_state":`...)
	b = append(b, ps...)
	b = append(b, `,"tracker":`...)
	b = append(b, tr...)
	b = append(b, `,"prices":`...)
	b = append(b, pr...)
	b = append(b, `,"routes":[]`...)
	if lp != nil {
		b = append(b, `,"last_plan":`...)
		b = append(b, lp...)
	}
	b = append(b, `,"next_route":`...)
	b = strconv.AppendInt(b, int64(n.NextRoute), 10)
	if n.Readings != 0 {
		b = append(b, `,"readings":`...)
		b = strconv.AppendInt(b, n.Readings, 10)
	}
	if n.EventsSeen != 0 {
		b = append(b, `,"events_seen":`...)
		b = strconv.AppendInt(b, n.EventsSeen, 10)
	}
	if len(n.Marks) > 0 { // a few, rarely: encoding/json's
		mb, err := json.Marshal(n.Marks)
		if err != nil {
			return nil, fmt.Errorf("save node %s: marks: %w: %w", n.Info.ID, store.ErrUnsaved, err)
		}
		b = append(b, `,"marks":`...)
		b = append(b, mb...)
	}
	return append(b, '}'), nil
}

// appendJSONString appends s as a JSON string: as it is when it needs no
// escaping (a node id, a role, a country), else as encoding/json writes
// it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
