package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func body(i int) []byte { return fmt.Appendf(nil, `{"n":%d}`, i) }

// drain drains q, giving each report's body.
func drain(t *testing.T, q *queue) []string {
	t.Helper()
	return drainAs(t, q, func(it queued) string { return string(it.body) })
}

// drainSeqs drains q, giving each report as run/seq.
func drainSeqs(t *testing.T, q *queue) []string {
	t.Helper()
	return drainAs(t, q, func(it queued) string { return fmt.Sprintf("%s/%d", it.run, it.seq) })
}

// drainAs takes every report off q, oldest first, each as show gives it.
func drainAs(t *testing.T, q *queue, show func(queued) string) []string {
	t.Helper()
	var out []string
	for {
		it, ok := q.head()
		if !ok {
			return out
		}
		out = append(out, show(it))
		if err := q.remove(it.id); err != nil {
			t.Fatal(err)
		}
	}
}

func TestQueueKeepsOrderAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), queueFile)
	q, _, err := openQueue(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := q.push(body(i)); err != nil {
			t.Fatal(err)
		}
	}
	it, _ := q.head()
	if err := q.remove(it.id); err != nil {
		t.Fatal(err)
	}
	if err := q.compact(); err != nil { // as at a clean stop
		t.Fatal(err)
	}
	q2, ld, err := openQueue(path, 10)
	if err != nil || ld.badLines != 0 || ld.dropped.n != 0 {
		t.Fatalf("reopen: bad lines %v dropped %d err %v", ld.bad, ld.dropped.n, err)
	}
	got := strings.Join(drain(t, q2), " ")
	if want := `{"n":1} {"n":2} {"n":3} {"n":4}`; got != want {
		t.Errorf("reopened queue = %s, want %s", got, want)
	}
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Errorf("drained queue file holds %q", b)
	}
}

func TestQueueOverflowDropsOldest(t *testing.T) {
	tests := []struct {
		name string
		path bool
	}{{"on disk", true}, {"in memory", false}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.path {
				path = filepath.Join(t.TempDir(), queueFile)
			}
			q, _, err := openQueue(path, 3)
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for i := range 5 {
				d, err := q.push(body(i))
				if err != nil {
					t.Fatal(err)
				}
				total += len(d)
			}
			if total != 2 {
				t.Errorf("dropped %d, want 2", total)
			}
			if tt.path {
				q, _, err = openQueue(path, 3)
				if err != nil {
					t.Fatal(err)
				}
			}
			got := strings.Join(drain(t, q), " ")
			if want := `{"n":2} {"n":3} {"n":4}`; got != want {
				t.Errorf("queue = %s, want %s", got, want)
			}
		})
	}
}

func TestQueueOpen(t *testing.T) {
	tests := []struct {
		name      string
		file      string
		max       int
		want      string  // after opening and pushing {"n":9}
		wantBad   []int64 // offsets of the lines skipped
		wantDrops int64   // the reports dropped at the opening
	}{
		{"missing file", "", 5, `{"n":9}`, nil, 0},
		{"torn last line", "{\"n\":0}\n{\"n\":1}\n{\"n\":", 5, `{"n":0} {"n":1} {"n":9}`, []int64{16}, 0},
		{"garbage line in the middle", "{\"n\":0}\nxx\n{\"n\":2}\n", 5, `{"n":0} {"n":2} {"n":9}`, []int64{8}, 0},
		{"report glued to a torn line", "{\"n\":0}\n{\"n\":{\"n\":2}\n{\"n\":3}\n", 5, `{"n":0} {"n":3} {"n":9}`, []int64{8}, 0},
		{"blank lines", "\n{\"n\":0}\n\n", 5, `{"n":0} {"n":9}`, nil, 0},
		// The head may have been sent by the process before: it is kept,
		// and the oldest after it go.
		{"more than the bound", "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n", 2, `{"n":0} {"n":9}`, nil, 2},
		{"the head and one more, bound 1", "{\"n\":0}\n{\"n\":1}\n", 1, `{"n":0} {"n":9}`, nil, 0},
		{"more than the bound, bound 1", "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n", 1, `{"n":0} {"n":9}`, nil, 1},
		{"line over 1 MiB", "{\"n\":0}\n\"" + strings.Repeat("x", maxQueueLine) + "\"\n{\"n\":2}\n{\"n\":3}\n", 5,
			`{"n":0} {"n":2} {"n":3} {"n":9}`, []int64{8}, 0},
		{"torn line over 1 MiB at the end", "{\"n\":0}\n\"" + strings.Repeat("x", maxQueueLine+queueReadChunk), 5,
			`{"n":0} {"n":9}`, []int64{8}, 0},
		{"line of 1 MiB", "{\"n\":0}\n{\"x\":\"" + strings.Repeat("x", maxQueueLine-8) + "\"}\n", 5,
			`{"n":0} {"x":"` + strings.Repeat("x", maxQueueLine-8) + `"} {"n":9}`, nil, 0},
		// Random bytes hold many lines that are JSON but no report.
		{"JSON that is not an object", "{\"n\":0}\n4\n\"s\"\n[1]\nnull\n{\"n\":5}\n", 5,
			`{"n":0} {"n":5} {"n":9}`, []int64{8, 10, 14, 18}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), queueFile)
			if tt.file != "" {
				if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			q, ld, err := openQueue(path, tt.max)
			if err != nil {
				t.Fatal(err)
			}
			var offsets []int64
			for _, b := range ld.bad {
				offsets = append(offsets, b.offset)
			}
			if !slices.Equal(offsets, tt.wantBad) || ld.badLines != int64(len(tt.wantBad)) || ld.dropped.n != tt.wantDrops {
				t.Errorf("bad lines at %v (%d), dropped %d; want %v, %d", offsets, ld.badLines, ld.dropped.n, tt.wantBad, tt.wantDrops)
			}
			// A push after a torn line must start on a line of its own.
			if _, err := q.push(body(9)); err != nil {
				t.Fatal(err)
			}
			q, _, err = openQueue(path, tt.max+1)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(drain(t, q), " "); got != tt.want {
				t.Errorf("queue = %.200s, want %.200s", got, tt.want)
			}
		})
	}
}

// TestQueueOpenDrops: what an opening drops is summed up by run, in
// bounded memory, with the seqs listed for a run of few and the range
// for one of many.
func TestQueueOpenDrops(t *testing.T) {
	var file bytes.Buffer
	line := func(run string, seq int) {
		fmt.Fprintf(&file, `{"run":%q,"seq":%d}`+"\n", run, seq)
	}
	line("a", 1) // the head
	for seq := 2; seq <= 5; seq++ {
		line("a", seq)
	}
	for seq := 1; seq <= 1000; seq++ {
		line("b", seq)
	}
	for i := range maxRunsListed + 3 {
		line(fmt.Sprintf("r%d", i), 1)
	}
	for seq := 1001; seq <= 1003; seq++ {
		line("b", seq)
	}
	path := filepath.Join(t.TempDir(), queueFile)
	if err := os.WriteFile(path, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	q, ld, err := openQueue(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(drainSeqs(t, q), " "), "a/1 b/1002 b/1003"; got != want {
		t.Errorf("kept %s, want %s", got, want)
	}
	d := ld.dropped
	if want := int64(4 + 1001 + maxRunsListed + 3); d.n != want {
		t.Errorf("dropped %d, want %d", d.n, want)
	}
	if len(d.runs) != maxRunsListed || d.otherN != 5 {
		t.Fatalf("%d runs listed, %d reports of others; want %d, 5", len(d.runs), d.otherN, maxRunsListed)
	}
	if r := d.runs[0]; r.run != "a" || r.n != 4 || joinSeqs(r.seqs) != "2,3,4,5" {
		t.Errorf("run a: %+v", r)
	}
	if r := d.runs[1]; r.run != "b" || r.n != 1001 || r.first != 1 || r.last != 1001 || len(r.seqs) != maxSeqsListed {
		t.Errorf("run b: n %d, seqs %d–%d, %d listed", r.n, r.first, r.last, len(r.seqs))
	}
}

// parseQueue scans b as openQueue scans a file.
func parseQueue(t testing.TB, b []byte) (items [][]byte, bad []badLine) {
	t.Helper()
	_, err := scanQueue(bytes.NewReader(b), func(body []byte) { items = append(items, body) },
		func(l badLine) { bad = append(bad, l) })
	if err != nil {
		t.Fatal(err)
	}
	return items, bad
}

func TestQueueRejects(t *testing.T) {
	if _, _, err := openQueue("", 0); err == nil {
		t.Error("bound 0 accepted")
	}
	q, _, _ := openQueue("", 2)
	for _, b := range []string{"", "{", "{\"a\":\n1}"} {
		if _, err := q.push([]byte(b)); err == nil {
			t.Errorf("push(%q) accepted", b)
		}
	}
	if q.len() != 0 {
		t.Errorf("len = %d after rejected pushes", q.len())
	}
}

func FuzzParseQueue(f *testing.F) {
	f.Add([]byte("{\"n\":0}\n{\"n\":1}\n"))
	f.Add([]byte("{\"n\":0}\n{\"n"))
	f.Add([]byte("\n\n[1,2]\nnull\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		items, bad := parseQueue(t, b)
		var all [][]byte
		for line := range bytes.Lines(b) {
			all = append(all, line)
		}
		if len(items)+len(bad) > len(all) {
			t.Fatalf("%d reports and %d bad lines from %d lines", len(items), len(bad), len(all))
		}
		for _, l := range bad {
			if l.offset < 0 || l.offset+int64(l.length) > int64(len(b)) {
				t.Fatalf("bad line %+v outside the %d bytes", l, len(b))
			}
		}
		for _, it := range items {
			if len(it) == 0 || strings.ContainsRune(string(it), '\n') {
				t.Fatalf("item %q is not one line", it)
			}
		}
	})
}

// TestQueueFailedAppendLeavesNoPart: an append that fails (here: the file
// cannot grow past its limit, as on a full disk) leaves the file as it was,
// the report stays queued in memory, and the next push writes both.
func TestQueueFailedAppendLeavesNoPart(t *testing.T) {
	path := filepath.Join(t.TempDir(), queueFile)
	q, _, err := openQueue(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.push(body(0)); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	// A directory in the file's place makes the append fail after the
	// file is gone; a read-only file does for root only with a full disk,
	// which TestIntegrationQueueDiskFull covers.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := q.push(body(1)); err == nil {
		t.Fatal("push into a directory succeeded")
	}
	if q.len() != 2 || !q.dirty {
		t.Fatalf("after a failed append: len %d dirty %v, want 2 true", q.len(), q.dirty)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := q.push(body(2)); err != nil {
		t.Fatal(err)
	}
	q2, ld, err := openQueue(path, 10)
	if err != nil || ld.badLines > 0 {
		t.Fatalf("reopen: %v %v", ld.bad, err)
	}
	if got, want := strings.Join(drain(t, q2), " "), `{"n":0} {"n":1} {"n":2}`; got != want {
		t.Errorf("queue on disk = %s, want %s", got, want)
	}
}

// TestQueueOverflowKeepsAReportThePlatformMayHave: a head the platform
// may have counted (being sent, sent with its answer lost, or read from
// disk, where the process before may have sent it) is never dropped on
// overflow: the oldest of the others goes, so a report is never both
// delivered and logged as dropped. A head whose every attempt failed
// before a connection was made is the oldest, and goes.
func TestQueueOverflowKeepsAReportThePlatformMayHave(t *testing.T) {
	tests := []struct {
		name     string
		tries    string // each attempt: "reached" (answer lost), "unsent", or "reopen" the file
		inFlight bool   // the push comes during one more attempt
		dropped  string
		want     string
	}{
		{"in flight", "", true, `{"n":1}`, `{"n":0} {"n":2} {"n":3}`},
		{"answer lost", "reached", false, `{"n":1}`, `{"n":0} {"n":2} {"n":3}`},
		{"answer lost, then unsent", "reached unsent", false, `{"n":1}`, `{"n":0} {"n":2} {"n":3}`},
		{"read from disk", "reopen", false, `{"n":1}`, `{"n":0} {"n":2} {"n":3}`},
		{"never sent", "", false, `{"n":0}`, `{"n":1} {"n":2} {"n":3}`},
		{"unsent", "unsent unsent", false, `{"n":0}`, `{"n":1} {"n":2} {"n":3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), queueFile)
			q, _, err := openQueue(path, 3)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if _, err := q.push(body(i)); err != nil {
					t.Fatal(err)
				}
			}
			for try := range strings.FieldsSeq(tt.tries) {
				if try == "reopen" {
					if q, _, err = openQueue(path, 3); err != nil {
						t.Fatal(err)
					}
					continue
				}
				it, _ := q.begin()
				q.end(it.id, try == "reached")
			}
			var it queued
			if tt.inFlight {
				it, _ = q.begin()
				if string(it.body) != `{"n":0}` {
					t.Fatalf("begin gave %s, want the head", it.body)
				}
			}
			dropped, err := q.push(body(3))
			if err != nil {
				t.Fatal(err)
			}
			if tt.inFlight {
				q.end(it.id, false)
			}
			var drops []string
			for _, it := range dropped {
				drops = append(drops, string(it.body))
			}
			if got := strings.Join(drops, " "); got != tt.dropped {
				t.Errorf("dropped %s, want %s", got, tt.dropped)
			}
			if got := strings.Join(drain(t, q), " "); got != tt.want {
				t.Errorf("queue = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestQueueRefusesASymlink: a symbolic link in the queue file's place is
// refused at open, naming it, and nothing is written through it: its
// target, all lines that are not reports, was once emptied in place
// (run as root, any file the link named).
func TestQueueRefusesASymlink(t *testing.T) {
	for _, content := range []string{"root:x:0:0:root:/root:/bin/bash\n", ""} {
		dir := t.TempDir()
		target := filepath.Join(t.TempDir(), "passwd")
		if err := os.WriteFile(target, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, queueFile)
		if err := os.Symlink(target, path); err != nil {
			t.Skipf("skipping: no symbolic links here: %v", err)
		}
		q, _, err := openQueue(path, 10)
		if err == nil {
			q.push(body(1))
			q.rewrite()
			t.Errorf("openQueue of a symbolic link: no error")
		} else if !strings.Contains(err.Error(), path+" is a symbolic link") {
			t.Errorf("openQueue of a symbolic link: %v, want an error naming it", err)
		}
		if b, _ := os.ReadFile(target); string(b) != content {
			t.Errorf("the link's target %q now holds %q", content, b)
		}
	}
}

// TestQueueOpenRefusesAFIFO: a named pipe in the queue file's place is
// refused, naming it, never read (reading one blocks until something
// writes).
func TestQueueOpenRefusesAFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), queueFile)
	if err := mkfifo(path); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("skipping: no named pipes here")
	} else if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := openQueue(path, 10); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), path+" is a named pipe (FIFO)") {
			t.Errorf("openQueue of a FIFO: %v, want an error naming it", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("openQueue of a FIFO blocked")
	}
}
