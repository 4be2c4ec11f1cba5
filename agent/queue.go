package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/proofkit/nodekit/internal/atomicfile"
)

// queueFile is the name of the report queue in the state directory.
const queueFile = "reports.jsonl"

// maxQueueLine bounds one line of the queue file: a report is a few
// hundred bytes to a few KiB, so a longer line is not one.
const maxQueueLine = 16 << 20

// A queue holds the reports not yet accepted by the platform, oldest first,
// bounded to max entries.
//
// Only the head is ever sent, and it leaves the queue only on an answer
// that settles it (a 2xx, a refusal). An overflow drops the oldest
// reports the platform cannot have: once the head may have reached the
// platform (it is being sent, an attempt to send it made a connection and
// got no such answer, or it was read from disk, and the process before
// may have sent it), an overflow drops the oldest of the others, and the
// head stays to be sent again: the platform then counts it, or answers
// that it has it. So a report dropped on overflow was never counted, and
// a report the platform counted is never logged as dropped.
//
// On disk it is one file of JSON lines, one report per line, in the order
// the readings were taken. A push appends one line and fsyncs it; an
// append that fails (a full disk) cuts the file back to its length before
// it, so no part of a line stays to be glued to the next, and the next
// push rewrites the whole file. Removing from the head (sent, or dropped
// on overflow) rewrites the whole file atomically (internal/atomicfile),
// except that a queue left empty (the usual case: each reading sent before
// the next) is only truncated, since a crash that undoes that sends the
// removed reports again, which the platform acknowledges as duplicates
// (same run, seq not above its last). A crash therefore loses nothing that
// was pushed: at worst the last line is torn. When the queue is opened
// again, a line that is not one JSON value (torn, or longer than 16 MiB)
// is skipped alone, and reported with its byte offset; every line after it
// is kept. With the default bound (120 readings, about 100 KiB for a node
// with one link and five listeners) a rewrite is cheap.
//
// A queue whose path is empty lives in memory only.
type queue struct {
	mu    sync.Mutex
	path  string
	max   int
	items []queued
	next  uint64 // id of the next push
	dirty bool   // the file lacks an item (a failed append): rewrite it at the next push
	// sending is set while the head is being sent: the platform may be
	// counting it at that moment, so an overflow keeps it.
	sending bool
}

// queued is one report in the queue; id identifies it while it is sent,
// node, run, seq and at are the reading's own (empty for a report without
// them). held is set while the agent has not yet saved the state holding
// the report's seq: it is not sent until then (see Agent.Step). sent is
// set once the platform may have the report: an attempt to send it made a
// connection, and no answer settled it (the connection was reset or timed
// out, a 5xx), or it heads a queue read from disk, which the process
// before may have sent. An overflow never drops a sent report.
type queued struct {
	id   uint64
	body []byte
	node string
	run  string
	seq  uint64
	at   time.Time
	held bool
	sent bool
}

// badLine is a line of a queue file that is not one report.
type badLine struct {
	offset int64  // byte offset of the line in the file
	length int    // its length in bytes, without the newline
	reason string // "not JSON", "longer than 16 MiB"
}

// openQueue opens (or creates) the queue at path, keeping at most max
// reports. It returns the lines it could not read (torn by a crash or a
// full disk) and the old reports dropped because the file held more than
// max (the bound was lowered since). The head is kept as sent: the process
// that queued it may have sent it, and stopped before the platform's
// answer or before taking it off the queue.
func openQueue(path string, max int) (q *queue, bad []badLine, dropped []queued, err error) {
	if max < 1 {
		return nil, nil, nil, fmt.Errorf("open report queue: bound %d is less than 1", max)
	}
	q = &queue{path: path, max: max}
	if path == "" {
		return q, nil, nil, nil
	}
	_ = atomicfile.RemoveTemps(path) // left by a crash during a rewrite
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil, fmt.Errorf("open report queue: %w", err)
	}
	var bodies [][]byte
	bodies, bad = parseQueue(b)
	for _, body := range bodies {
		q.items = append(q.items, q.item(body))
	}
	if len(q.items) > 0 {
		q.items[0].sent = true
	}
	dropped = q.overflow(0)
	if len(bad) > 0 || len(dropped) > 0 || (err == nil && len(b) > 0 && b[len(b)-1] != '\n') {
		if err := q.rewrite(); err != nil {
			return nil, nil, nil, fmt.Errorf("open report queue: %w", err)
		}
	}
	return q, bad, dropped, nil
}

// parseQueue splits a queue file into its reports. A line that is not one
// complete JSON value (torn by a crash mid-append), or is longer than
// maxQueueLine, is skipped on its own; blank lines are ignored.
func parseQueue(b []byte) (items [][]byte, bad []badLine) {
	var off int64
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte{'\n'})
		start := off
		off += int64(len(line)) + 1
		b = rest
		trimmed := bytes.TrimSpace(line)
		switch {
		case len(trimmed) == 0:
		case len(line) > maxQueueLine:
			bad = append(bad, badLine{start, len(line), "longer than 16 MiB"})
		case !json.Valid(trimmed):
			bad = append(bad, badLine{start, len(line), "not JSON"})
		default:
			items = append(items, bytes.Clone(trimmed))
		}
	}
	return items, bad
}

// item makes the queue entry of body, with the next id.
func (q *queue) item(body []byte) queued {
	var id struct {
		Node string    `json:"node"`
		Run  string    `json:"run"`
		Seq  uint64    `json:"seq"`
		At   time.Time `json:"at"`
	}
	_ = json.Unmarshal(body, &id) // a report without them is still sent
	it := queued{id: q.next, body: body, node: id.Node, run: id.Run, seq: id.Seq, at: id.At}
	q.next++
	return it
}

// push adds a report at the tail. When the queue is full the oldest
// reports go to make room: the platform needs the latest state more than
// the oldest. A head the platform may have is kept (see queue), so with
// a bound of 1 the queue then holds two. It returns the reports dropped.
// On a write error the report stays queued in memory (and is sent while
// the process runs); the file is left as it was before.
func (q *queue) push(report []byte) (dropped []queued, err error) {
	_, dropped, err = q.pushItem(report, false)
	return dropped, err
}

// pushHeld pushes as push does, and holds the report back from begin
// until release(id) is called: it is on disk, and not sent, until then.
func (q *queue) pushHeld(report []byte) (id uint64, dropped []queued, err error) {
	return q.pushItem(report, true)
}

func (q *queue) pushItem(report []byte, held bool) (id uint64, dropped []queued, err error) {
	if !json.Valid(report) || bytes.ContainsAny(report, "\n") {
		return noID, nil, errors.New("push report: not a single-line JSON value")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	item := q.item(bytes.Clone(report))
	item.held = held
	id = item.id
	if dropped = q.overflow(1); len(dropped) > 0 {
		q.items = append(q.items, item)
		if err := q.rewrite(); err != nil {
			return id, dropped, fmt.Errorf("push report: %w", err)
		}
		return id, dropped, nil
	}
	q.items = append(q.items, item)
	if q.dirty {
		err = q.rewrite()
	} else {
		err = q.appendLine(item.body)
	}
	if err != nil {
		q.dirty = true
		return id, nil, fmt.Errorf("push report: %w", err)
	}
	return id, nil, nil
}

// overflow drops, in memory, the oldest reports that leave room for extra
// more within the bound, and returns them. A head the platform may have
// is kept (see queue); the queue then holds at least it and one more.
func (q *queue) overflow(extra int) (dropped []queued) {
	keep := 0
	if len(q.items) > 0 && (q.sending || q.items[0].sent) {
		keep = 1
	}
	n := len(q.items) + extra - max(q.max, keep+1)
	if n <= 0 {
		return nil
	}
	dropped = slices.Clone(q.items[keep : keep+n])
	q.items = slices.Delete(q.items, keep, keep+n)
	return dropped
}

// head returns the oldest report; ok is false when the queue is empty.
func (q *queue) head() (it queued, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return queued{}, false
	}
	return q.items[0], true
}

// begin returns the head, as head does, and marks it as being sent until
// end is called (see queue.sending); both in one step, so no overflow
// drops it in between.
func (q *queue) begin() (it queued, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || q.items[0].held {
		return queued{}, false
	}
	q.sending = true
	return q.items[0], true
}

// has says whether the report id is queued.
func (q *queue) has(id uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, it := range q.items {
		if it.id == id {
			return true
		}
	}
	return false
}

// release lets the held report id be sent.
func (q *queue) release(id uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range q.items {
		if q.items[i].id == id {
			q.items[i].held = false
		}
	}
}

// replace puts report in the place of the report id, if it is still
// queued, and rewrites the file.
func (q *queue) replace(id uint64, report []byte) error {
	if !json.Valid(report) || bytes.ContainsAny(report, "\n") {
		return errors.New("replace report: not a single-line JSON value")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, it := range q.items {
		if it.id == id {
			n := q.item(bytes.Clone(report))
			n.id, n.held, n.sent = it.id, it.held, it.sent
			q.items[i] = n
			if err := q.rewrite(); err != nil {
				return fmt.Errorf("replace report: %w", err)
			}
			return nil
		}
	}
	return nil
}

// end says the head, report id, is no longer being sent. reached says
// whether the attempt may have reached the platform (it made a
// connection): then, until an answer takes the report off the queue, the
// platform may have it (see queued.sent).
func (q *queue) end(id uint64, reached bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sending = false
	if reached && len(q.items) > 0 && q.items[0].id == id {
		q.items[0].sent = true
	}
}

// remove takes the report id off the head of the queue if it is still
// there.
func (q *queue) remove(id uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || q.items[0].id != id {
		return nil
	}
	q.items[0] = queued{}
	q.items = q.items[1:]
	if err := q.rewrite(); err != nil {
		return fmt.Errorf("remove report: %w", err)
	}
	return nil
}

// len returns the number of reports waiting.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// maxSeq returns the highest seq of run among the queued reports, and
// that report's at.
func (q *queue) maxSeq(run string) (seq uint64, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, it := range q.items {
		if it.run == run && it.seq > seq {
			seq, at = it.seq, it.at
		}
	}
	return seq, at
}

// nodes returns the nodes of the queued reports other than node, each
// with how many reports it has.
func (q *queue) nodes(node string) map[string]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out map[string]int
	for _, it := range q.items {
		if it.node != "" && it.node != node {
			if out == nil {
				out = make(map[string]int)
			}
			out[it.node]++
		}
	}
	return out
}

// appendLine appends item and a newline and fsyncs. If the write or the
// fsync fails, the file is cut back to its length before, so a short
// write leaves no part of a line behind.
func (q *queue) appendLine(item []byte) error {
	if q.path == "" {
		return nil
	}
	f, err := os.OpenFile(q.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	good, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return err
	}
	line := append(bytes.Clone(item), '\n')
	_, err = f.Write(line)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		if terr := f.Truncate(good); terr != nil {
			err = fmt.Errorf("%w (and cutting the file back to %d bytes: %v)", err, good, terr)
		}
		f.Close()
		return err
	}
	return f.Close()
}

func (q *queue) rewrite() error {
	if q.path == "" {
		return nil
	}
	if len(q.items) == 0 {
		// Emptying needs no temp file, fsync or rename: a crash that
		// brings the old lines back only sends them again.
		if err := os.Truncate(q.path, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		q.dirty = false
		return nil
	}
	var buf bytes.Buffer
	for _, it := range q.items {
		buf.Write(it.body)
		buf.WriteByte('\n')
	}
	// Until a rewrite succeeds the file may lack the newest items.
	q.dirty = true
	if err := atomicfile.WriteFile(q.path, buf.Bytes(), 0o600); err != nil {
		return err
	}
	q.dirty = false
	return nil
}
