package filestore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/atomicfile"
)

// outboxFile is the file store's outbox, in the state directory.
const outboxFile = "outbox.log"

// keepFinished is how long the file store keeps a finished delivery
// (delivered, failed, undeliverable) to show beside its notice.
const keepFinished = 30 * 24 * time.Hour

// fileOutbox is the file store's outbox: a log of delivery records, one
// JSON line each, appended and fsynced before the call returns, and
// replayed (and compacted) at start. Claims live in memory: after a
// crash, a delivery that was in flight is due again, with the same id.
type fileOutbox struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	all    map[string]*store.Delivery
	leased map[string]time.Time // id → when its claim runs out
	// size is where the log's last whole record ends; torn says an
	// append failed and could not be cut back to it yet.
	size int64
	torn bool
}

// outboxRecord is one line of the log: put (the delivery's whole state)
// or drop (a delivery whose notice was not saved after all).
type outboxRecord struct {
	Op string          `json:"op"`
	D  *store.Delivery `json:"d,omitempty"`
	ID string          `json:"id,omitempty"`
}

var _ store.OutboxStore = (*fileOutbox)(nil)

// openFileOutbox replays dir's outbox log and rewrites it compacted (one
// put per delivery, finished ones older than keepFinished left out). A
// log that does not read back stops the start, naming the line; a last
// line cut short by a crash is dropped (its append never returned).
func openFileOutbox(dir string, now time.Time) (*fileOutbox, error) {
	o := &fileOutbox{path: filepath.Join(dir, outboxFile), all: map[string]*store.Delivery{}, leased: map[string]time.Time{}}
	b, err := readState(o.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var rec outboxRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			if line == bytes.Count(b, []byte{'\n'})+1 && !bytes.HasSuffix(b, []byte{'\n'}) {
				break // the last append, cut short: it never returned
			}
			return nil, fmt.Errorf("outbox %s:%d: %w", o.path, line, err)
		}
		switch {
		case rec.Op == "put" && rec.D != nil && rec.D.ID != "":
			o.all[rec.D.ID] = rec.D
		case rec.Op == "drop":
			delete(o.all, rec.ID)
		default:
			return nil, fmt.Errorf("outbox %s:%d: op %q: want put (with a delivery) or drop", o.path, line, rec.Op)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("outbox %s: %w", o.path, err)
	}
	var buf bytes.Buffer
	for _, id := range slices.Sorted(maps.Keys(o.all)) {
		d := o.all[id]
		if d.Status != store.StatusPending && now.Sub(d.Created) > keepFinished {
			delete(o.all, id)
			continue
		}
		line, err := json.Marshal(outboxRecord{Op: "put", D: d})
		if err != nil {
			return nil, fmt.Errorf("outbox: %w", err)
		}
		buf.Write(append(line, '\n'))
	}
	if err := atomicfile.WriteFile(o.path, buf.Bytes(), 0o600); err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	if o.f, err = os.OpenFile(o.path, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	o.size = int64(buf.Len())
	return o, nil
}

func (o *fileOutbox) close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.f.Close()
}

// appendLocked writes rec and syncs it to disk. An append that fails
// (a full disk writes part of the line) is cut off again, so the next
// one starts on a line of its own: a torn line in the middle of the log
// would stop the next start.
func (o *fileOutbox) appendLocked(rec outboxRecord) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if o.torn {
		if err := o.f.Truncate(o.size); err != nil {
			return fmt.Errorf("outbox: cutting off a failed append: %w", err)
		}
		o.torn = false
	}
	line = append(line, '\n')
	_, err = o.f.Write(line)
	if err == nil {
		err = o.f.Sync()
	}
	if err != nil {
		o.torn = o.f.Truncate(o.size) != nil
		return fmt.Errorf("outbox: %w", err)
	}
	o.size += int64(len(line))
	return nil
}

// add writes a new delivery; it is on disk when add returns.
func (o *fileOutbox) add(d store.Delivery) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.all[d.ID]; ok {
		return nil // decided once already
	}
	if err := o.appendLocked(outboxRecord{Op: "put", D: &d}); err != nil {
		return err
	}
	o.all[d.ID] = &d
	return nil
}

// drop takes back a delivery whose notice was not saved.
func (o *fileOutbox) drop(id string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.all[id]; !ok {
		return nil
	}
	delete(o.all, id)
	return o.appendLocked(outboxRecord{Op: "drop", ID: id})
}

// pendingIDs is every pending delivery, for the start's check against
// the node files.
func (o *fileOutbox) pending() []store.Delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []store.Delivery
	for _, d := range o.all {
		if d.Status == store.StatusPending {
			out = append(out, *d)
		}
	}
	return out
}

func (o *fileOutbox) Claim(_ context.Context, now time.Time, max int, lease time.Duration, f store.ClaimFilter) ([]store.Delivery, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// A node's messages go in the order they were decided: only its
	// pending message of the lowest Seq may be claimed.
	first := map[string]int64{}
	for _, d := range o.all {
		if s, ok := first[d.Node]; d.Status == store.StatusPending && (!ok || d.Seq < s) {
			first[d.Node] = d.Seq
		}
	}
	var due []*store.Delivery
	for id, d := range o.all {
		if d.Status != store.StatusPending || !f.Due(d.NextAt, now, lease) || !f.Due(o.leased[id], now, lease) || !f.Allows(d.Node) || d.Seq > first[d.Node] {
			continue
		}
		due = append(due, d)
	}
	slices.SortFunc(due, func(a, b *store.Delivery) int {
		if c := a.NextAt.Compare(b.NextAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(due) > max {
		due = due[:max]
	}
	out := make([]store.Delivery, len(due))
	for i, d := range due {
		d.Attempts++
		o.leased[d.ID] = now.Add(lease)
		out[i] = *d
	}
	return out, nil
}

func (o *fileOutbox) Settle(_ context.Context, d store.Delivery, res store.AttemptResult) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := o.all[d.ID]
	if cur == nil || cur.Status != store.StatusPending || (cur.Attempts != d.Attempts && res.Outcome != store.OutcomeDelivered) {
		return nil // settled already, or claimed again since
	}
	next := d.Apply(res)
	if err := o.appendLocked(outboxRecord{Op: "put", D: &next}); err != nil {
		return err
	}
	*cur = next
	delete(o.leased, d.ID)
	return nil
}

func (o *fileOutbox) Redeliver(_ context.Context, id string, now time.Time) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := o.all[id]
	if cur == nil {
		return false, nil
	}
	next := *cur
	// Asked for again: due now, given up only -notify-give-up from now.
	next.Status, next.NextAt, next.Created, next.DeliveredAt = store.StatusPending, now, now, time.Time{}
	if err := o.appendLocked(outboxRecord{Op: "put", D: &next}); err != nil {
		return false, err
	}
	*cur = next
	delete(o.leased, id)
	return true, nil
}

func (o *fileOutbox) ByIDs(_ context.Context, ids []string) (map[string]store.Delivery, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]store.Delivery{}
	for _, id := range ids {
		if d := o.all[id]; d != nil {
			out[id] = *d
		}
	}
	return out, nil
}

func (o *fileOutbox) ByNode(_ context.Context, node string, limit int) ([]store.Delivery, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []store.Delivery
	for _, d := range o.all {
		if d.Node == node {
			out = append(out, *d)
		}
	}
	slices.SortFunc(out, func(a, b store.Delivery) int { return b.Created.Compare(a.Created) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (o *fileOutbox) Counts(context.Context) (map[string]int64, time.Time, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int64{}
	var oldest time.Time
	for _, d := range o.all {
		out[d.Status]++
		if d.Status == store.StatusPending && (oldest.IsZero() || d.Created.Before(oldest)) {
			oldest = d.Created
		}
	}
	return out, oldest, nil
}

// openOutbox opens the state directory's outbox when the platform
// delivers notices, and drops the deliveries whose notice never reached
// its node's file (the platform stopped between the two writes).
func (p *Store) openOutbox() error {
	if p.Dispatch == nil {
		return nil
	}
	box, err := openFileOutbox(p.Config.StateDir, p.Now())
	if err != nil {
		return err
	}
	for _, d := range box.pending() {
		n := p.nodes[d.Node]
		saved := n != nil
		if saved {
			switch d.Type {
			case store.TypeOverloaded:
				saved = n.Tracker.LastNotice().UnixMicro() >= d.At.UnixMicro()
			case store.TypeOverloadEnded:
				saved = n.Tracker.LastEnd().UnixMicro() >= d.At.UnixMicro()
			}
		}
		if !saved {
			p.Log.Warn("outbox: dropping a delivery whose notice was not saved", "id", d.ID, "node", d.Node)
			if err := box.drop(d.ID); err != nil {
				return err
			}
		}
	}
	p.box = box
	return nil
}

// Outbox is the store's outbox, for its notifier; nil without one.
func (p *Store) Outbox() store.OutboxStore {
	if p.box == nil {
		return nil
	}
	return p.box
}

// enqueueDecided writes the outbox entries of what a report decided (its
// notice, and the end of an overload when asked for) before the node's
// file is written: a crash between the two leaves an entry whose notice
// the node file does not hold, which openOutbox drops, never a notice
// without its entry. It returns the ids written, for dropDecided.
func (p *Store) enqueueDecided(n *store.Node, now time.Time) ([]string, error) {
	if p.box == nil {
		return nil, nil
	}
	var ds []store.Delivery
	for _, of := range []func(*store.Node, time.Time) (store.Delivery, bool, error){p.NoticeDelivery, p.EndDelivery} {
		d, ok, err := of(n, now)
		if err != nil {
			return nil, err
		}
		if ok {
			ds = append(ds, d)
		}
	}
	var ids []string
	for _, d := range ds {
		if err := p.box.add(d); err != nil {
			p.dropDecided(ids)
			return nil, fmt.Errorf("node %s: %w: %w", n.Info.ID, store.ErrUnsaved, err)
		}
		ids = append(ids, d.ID)
	}
	return ids, nil
}

// dropDecided takes back entries whose node file could not be written.
func (p *Store) dropDecided(ids []string) {
	for _, id := range ids {
		if err := p.box.drop(id); err != nil {
			p.Log.Error("outbox: taking back a delivery", "id", id, "err", err)
		}
	}
}
