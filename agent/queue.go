package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/proofkit/nodekit/internal/atomicfile"
	"github.com/proofkit/nodekit/internal/procfile"
)

// queueFile is the name of the report queue in the state directory.
const queueFile = "reports.jsonl"

// maxQueueLine bounds one line of the queue file. The platform takes a
// report of at most 1 MiB and refuses a longer one as too large, so a
// longer line is not a report worth keeping; a report is a few hundred
// bytes to a few KiB (about 60 KiB with the 1,024 listeners a probe
// lists at most).
const maxQueueLine = 1 << 20

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
// push rewrites the whole file. Dropping on overflow rewrites the whole
// file atomically (internal/atomicfile). Removing the head once it is
// settled blanks its line in place (spaces, fsynced) while other reports
// wait, and a queue left empty (the usual case: each reading sent before
// the next) is truncated (a crash that undoes a truncation sends the
// last report again, which the platform acknowledges as a duplicate:
// same run, seq not above its last). The file is rewritten once a push
// would make it hold more lines than the bound, and at a clean stop
// (compact). A crash therefore loses nothing that was pushed, and sends
// nothing removed again but that last report: at worst the last line is
// torn. When the queue is opened
// again, the file is read as a stream with the bound applied while
// reading, so a file of any size opens in bounded memory: a line that is
// not one JSON object (torn, or longer than 1 MiB) is skipped alone, and
// reported with its byte offset; every line after it is kept; of more
// reports than the bound, the newest are kept. With the default bound
// (120 readings, about 100 KiB for a node with one link and five
// listeners) a rewrite is cheap.
//
// A queue whose path is empty lives in memory only.
type queue struct {
	mu    sync.Mutex
	path  string
	max   int
	items []queued
	next  uint64 // id of the next push
	dirty bool   // the file lacks an item (a failed append): rewrite it at the next push
	// stale is how many lines at the start of the file are reports
	// already taken off the queue (see remove), blanked; headAt is the
	// byte offset of the line after them, the head's. The rest of the
	// file is the queued reports' lines, each its body and a newline.
	stale  int
	headAt int64
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
	length int64  // its length in bytes, without the newline
	reason string // "not JSON", "not a JSON object", "longer than 1 MiB"
}

// Bounds on what opening a queue file keeps to say what it skipped and
// dropped: a file of any size is read in bounded memory.
const (
	maxBadListed  = 8  // bad lines listed one by one; the rest are counted
	maxRunsListed = 16 // runs whose dropped reports are listed; the rest are counted
	maxSeqsListed = 32 // seqs listed of one run's dropped reports; the rest as a range
	// queueReadChunk is the read size: 2,048 reads for a 2 GiB file.
	queueReadChunk = 1 << 20
	keepLineBuf    = 64 << 10 // a line buffer grown past this is let go
)

// loaded is what opening a queue file left out of the queue: the lines
// that are not reports, and the old reports beyond the bound.
type loaded struct {
	bad      []badLine // the first maxBadListed lines skipped
	badLines int64     // every line skipped
	badBytes int64     // their length in bytes
	dropped  drops
}

// drops sums up reports dropped on overflow, by run, in bounded memory.
type drops struct {
	n      int64
	runs   []runDrops // the first maxRunsListed runs met, in that order
	otherN int64      // the reports of further runs
}

// runDrops is the reports of one run dropped on overflow.
type runDrops struct {
	run         string
	n           int64
	seqs        []uint64 // the first maxSeqsListed
	first, last uint64   // the lowest and highest seq
}

// add counts it as dropped.
func (d *drops) add(it queued) {
	d.n++
	for i := range d.runs {
		if r := &d.runs[i]; r.run == it.run {
			r.n++
			if len(r.seqs) < maxSeqsListed {
				r.seqs = append(r.seqs, it.seq)
			}
			r.first, r.last = min(r.first, it.seq), max(r.last, it.seq)
			return
		}
	}
	if len(d.runs) == maxRunsListed {
		d.otherN++
		return
	}
	d.runs = append(d.runs, runDrops{run: it.run, n: 1, seqs: []uint64{it.seq}, first: it.seq, last: it.seq})
}

// openQueue opens (or creates) the queue at path, keeping at most max
// reports. It reads the file as a stream, holding at most max reports
// (each at most 1 MiB) at any moment, so a file of any size or content
// opens in bounded memory. It returns what it left out: the lines it
// could not read (torn by a crash or a full disk, or longer than a
// report can be) and the old reports beyond the bound (lowered since, or
// a file not written by an agent), the oldest after the head. The head is
// kept as sent: the process that queued it may have sent it, and stopped
// before the platform's answer or before taking it off the queue. A file
// from which anything was left out is rewritten with what was kept.
//
// The file must be a regular one: a FIFO or a device in its place is an
// error, never read (reading a FIFO blocks until something writes).
func openQueue(path string, bound int) (q *queue, ld loaded, err error) {
	if bound < 1 {
		return nil, ld, fmt.Errorf("open report queue: bound %d is less than 1", bound)
	}
	q = &queue{path: path, max: bound}
	if path == "" {
		return q, ld, nil
	}
	_ = atomicfile.RemoveTemps(path) // left by a crash during a rewrite
	// The queue is appended to and emptied in place: through a symbolic
	// link that would write another file (run as root, any file).
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, ld, fmt.Errorf("open report queue: %s is a symbolic link; want a file of the agent's own (remove the link)", path)
	}
	f, fi, err := procfile.Open(context.Background(), path)
	if errors.Is(err, os.ErrNotExist) {
		return q, ld, nil
	}
	if err != nil {
		return nil, ld, fmt.Errorf("open report queue: %w", err)
	}
	defer f.Close()
	// The head, and the newest of the others the bound leaves room for
	// (see overflow: with a bound of 1, the head and one more).
	var (
		head  *queued
		ring  = make([]queued, 0, min(bound, 1024))
		start int // the oldest of ring once it is full
		keep  = max(bound, 2) - 1
	)
	clean, err := scanQueue(f, func(body []byte) {
		it := q.item(body)
		switch {
		case head == nil:
			head = &it
		case len(ring) < keep:
			ring = append(ring, it)
		default:
			ld.dropped.add(ring[start])
			ring[start] = it
			start = (start + 1) % keep
		}
	}, func(b badLine) {
		if len(ld.bad) < maxBadListed {
			ld.bad = append(ld.bad, b)
		}
		ld.badLines++
		ld.badBytes += b.length
	})
	if err != nil {
		return nil, loaded{}, fmt.Errorf("open report queue: %s: %w", path, err)
	}
	if head != nil {
		head.sent = true
		q.items = append(q.items, *head)
		q.items = append(q.items, ring[start:]...)
		q.items = append(q.items, ring[:start]...)
	}
	// A file that is not just the kept reports' lines (blank lines of
	// reports sent before, white space around a line) is written again,
	// so that remove can blank the head's line where it is.
	var lines int64
	for _, it := range q.items {
		lines += int64(len(it.body)) + 1
	}
	if !clean || ld.badLines > 0 || ld.dropped.n > 0 || lines != fi.Size() {
		if err := q.rewrite(); err != nil {
			return nil, loaded{}, fmt.Errorf("open report queue: %w", err)
		}
	}
	return q, ld, nil
}

// scanQueue reads a queue file from r, line by line in bounded memory
// (its 1 MiB read buffer and a line of at most maxQueueLine),
// and calls report with each line that is one JSON object (without the
// white space around it) and bad with each that is not, or is longer
// than maxQueueLine (read past, never held); blank lines are ignored.
// The body given to report is its own. clean says whether the file ended
// in a newline (or was empty): if not, its last line was torn.
func scanQueue(r io.Reader, report func([]byte), bad func(badLine)) (clean bool, err error) {
	br := bufio.NewReaderSize(r, queueReadChunk)
	var (
		line    []byte // the line so far, while it is within maxQueueLine
		length  int64  // its length so far
		off     int64  // the offset of the line
		endedNL = true
	)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			endedNL = chunk[len(chunk)-1] == '\n'
		}
		end := endedNL && len(chunk) > 0
		part := chunk
		if end {
			part = chunk[:len(chunk)-1]
		}
		length += int64(len(part))
		if length <= maxQueueLine {
			line = append(line, part...)
		} else {
			line = line[:0] // too long: only its length is kept
		}
		if end || (err == io.EOF && length > 0) {
			trimmed := bytes.TrimSpace(line)
			switch {
			case length > maxQueueLine:
				bad(badLine{off, length, "longer than 1 MiB"})
			case len(trimmed) == 0:
			case !json.Valid(trimmed):
				bad(badLine{off, length, "not JSON"})
			case trimmed[0] != '{':
				// A number, string or array is JSON but no report: a
				// line of random bytes is often one ("4").
				bad(badLine{off, length, "not a JSON object"})
			default:
				report(bytes.Clone(trimmed))
			}
			off += length
			if end {
				off++
			}
			length = 0
			if cap(line) > keepLineBuf {
				line = nil // a long line's buffer goes
			}
			line = line[:0]
		}
		switch {
		case err == io.EOF:
			return endedNL, nil
		case err != nil && !errors.Is(err, bufio.ErrBufferFull):
			return false, err
		}
	}
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
	if q.dirty || q.stale+len(q.items) > q.fileMax() {
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
// there. While other reports are queued, its line is blanked where it
// is (spaces in place of the report, fsynced; opening the file skips
// blank lines) and stays in the file, until a push would make the file
// hold more lines than the bound (see fileMax) or compact is called; a
// queue left empty is truncated. So draining n queued reports writes
// each report's bytes once more, not the whole file n times (5,000
// reports of 1 KiB wrote 12 GB when each removal rewrote it), and a
// crash in between sends none of them again: a report's line left in
// the file would be sent again by the next process, which may have
// started another run, and a platform that has seen another run since
// counts it twice.
func (q *queue) remove(id uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || q.items[0].id != id {
		return nil
	}
	head := q.items[0]
	q.items[0] = queued{}
	q.items = q.items[1:]
	if len(q.items) > 0 && !q.dirty && q.path != "" {
		if err := q.blank(q.headAt, len(head.body)); err == nil {
			q.stale++
			q.headAt += int64(len(head.body)) + 1
			return nil
		}
		// Not blanked: the file is written again without it.
	}
	if err := q.rewrite(); err != nil {
		return fmt.Errorf("remove report: %w", err)
	}
	return nil
}

// blank overwrites n bytes of the file at off with spaces and fsyncs.
func (q *queue) blank(off int64, n int) error {
	f, err := os.OpenFile(q.path, os.O_WRONLY|oNoFollow, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(bytes.Repeat([]byte{' '}, n), off)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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
	f, err := os.OpenFile(q.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|oNoFollow, 0o600)
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

// fileMax is the most lines the file may hold, stale ones included: as
// many as opening it keeps (the bound, and a head kept beyond a bound of
// 1), so that a crash leaves no queued report for opening to drop.
func (q *queue) fileMax() int { return max(q.max, 2) }

func (q *queue) rewrite() error {
	if q.path == "" {
		return nil
	}
	if len(q.items) == 0 {
		// Emptying needs no temp file, fsync or rename: a crash that
		// brings the old lines back only sends them again.
		if err := truncateFile(q.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		q.dirty, q.stale, q.headAt = false, 0, 0
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
	q.dirty, q.stale, q.headAt = false, 0, 0
	return nil
}

// truncateFile empties the file at path, never one a symbolic link at
// path points to (os.Truncate follows it).
func truncateFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|oNoFollow, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// detach keeps the queue in memory from now on: its file is another's.
func (q *queue) detach() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.path, q.dirty, q.stale, q.headAt = "", false, 0, 0
}

// lost says the file is gone (its directory was removed): the next push
// writes every queued report to a new one.
func (q *queue) lost() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dirty, q.stale, q.headAt = true, 0, 0
}

// compact writes the file again if it holds more than the queued
// reports (lines of reports already sent, see remove) or lacks some (a
// failed append): at a clean stop, so that the next start sends nothing
// twice and loses nothing the disk now has room for.
func (q *queue) compact() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stale == 0 && !q.dirty {
		return nil
	}
	if err := q.rewrite(); err != nil {
		return fmt.Errorf("compact report queue: %w", err)
	}
	return nil
}
