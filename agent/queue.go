package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// queueFile is the name of the report queue in the state directory.
const queueFile = "reports.jsonl"

// A queue holds the reports not yet accepted by the platform, oldest first,
// bounded to max entries.
//
// On disk it is one file of JSON lines, one report per line, in the order
// the readings were taken. A push appends one line and fsyncs it; removing
// from the head (sent, or dropped on overflow) rewrites the whole file
// atomically (temp file, fsync, rename, fsync of the directory), except
// that a queue left empty (the usual case: each reading sent before the
// next) is only truncated, since a crash that undoes that sends the
// removed reports again, which the platform takes as duplicates. A crash
// therefore loses nothing that was pushed: at worst the last line is torn,
// and a torn line is skipped (and counted) when the queue is opened again.
// With the default bound (120 readings, about 150 KiB) a rewrite is cheap.
//
// A queue whose path is empty lives in memory only.
type queue struct {
	mu    sync.Mutex
	path  string
	max   int
	items []queued
	next  uint64 // sequence number of the next push
}

// queued is one report in the queue; seq identifies it while it is sent.
type queued struct {
	seq  uint64
	body []byte
}

// openQueue opens (or creates) the queue at path, keeping at most max
// reports. It returns the number of lines it could not read (torn by a
// crash) and the number of old reports dropped because the file held more
// than max.
func openQueue(path string, max int) (q *queue, torn, dropped int, err error) {
	if max < 1 {
		return nil, 0, 0, fmt.Errorf("open report queue: bound %d is less than 1", max)
	}
	q = &queue{path: path, max: max}
	if path == "" {
		return q, 0, 0, nil
	}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, 0, 0, fmt.Errorf("open report queue: %w", err)
	}
	var bodies [][]byte
	bodies, torn = parseQueue(b)
	for _, body := range bodies {
		q.items = append(q.items, queued{seq: q.next, body: body})
		q.next++
	}
	if n := len(q.items) - max; n > 0 {
		q.items = q.items[n:]
		dropped = n
	}
	if torn > 0 || dropped > 0 || (err == nil && len(b) > 0 && b[len(b)-1] != '\n') {
		if err := q.rewrite(); err != nil {
			return nil, 0, 0, fmt.Errorf("open report queue: %w", err)
		}
	}
	return q, torn, dropped, nil
}

// parseQueue splits a queue file into its reports, skipping lines that are
// not one complete JSON value (a line torn by a crash mid-append).
func parseQueue(b []byte) (items [][]byte, torn int) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			torn++
			continue
		}
		items = append(items, bytes.Clone(line))
	}
	if sc.Err() != nil {
		// A line longer than the scanner's limit: count the rest as torn.
		torn++
	}
	return items, torn
}

// push adds a report at the tail. When the queue is full the oldest
// reports go to make room: the platform needs the latest state more than
// the oldest. It returns how many were dropped.
func (q *queue) push(report []byte) (dropped int, err error) {
	if !json.Valid(report) || bytes.ContainsAny(report, "\n") {
		return 0, errors.New("push report: not a single-line JSON value")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	item := queued{seq: q.next, body: bytes.Clone(report)}
	q.next++
	if len(q.items) >= q.max {
		dropped = len(q.items) - q.max + 1
		q.items = append(q.items[dropped:], item)
		if err := q.rewrite(); err != nil {
			return dropped, fmt.Errorf("push report: %w", err)
		}
		return dropped, nil
	}
	q.items = append(q.items, item)
	if err := q.appendLine(item.body); err != nil {
		return 0, fmt.Errorf("push report: %w", err)
	}
	return 0, nil
}

// head returns the oldest report and its sequence number; ok is false when
// the queue is empty.
func (q *queue) head() (seq uint64, body []byte, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return 0, nil, false
	}
	return q.items[0].seq, q.items[0].body, true
}

// remove takes the report seq off the head of the queue if it is still
// there (an overflow may have dropped it while it was being sent).
func (q *queue) remove(seq uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || q.items[0].seq != seq {
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

func (q *queue) appendLine(item []byte) error {
	if q.path == "" {
		return nil
	}
	f, err := os.OpenFile(q.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	line := append(bytes.Clone(item), '\n')
	if _, err := f.Write(line); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
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
		return nil
	}
	var buf bytes.Buffer
	for _, it := range q.items {
		buf.Write(it.body)
		buf.WriteByte('\n')
	}
	return writeFileAtomic(q.path, buf.Bytes())
}

// writeFileAtomic replaces path with data so that a crash leaves either the
// old file or the new one: temp file in the same directory, fsync, rename,
// fsync of the directory.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
