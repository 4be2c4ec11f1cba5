package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func body(i int) []byte { return fmt.Appendf(nil, `{"n":%d}`, i) }

func drain(t *testing.T, q *queue) []string {
	t.Helper()
	var out []string
	for {
		it, ok := q.head()
		if !ok {
			return out
		}
		out = append(out, string(it.body))
		if err := q.remove(it.id); err != nil {
			t.Fatal(err)
		}
	}
}

func TestQueueKeepsOrderAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), queueFile)
	q, _, _, err := openQueue(path, 10)
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
	q2, bad, dropped, err := openQueue(path, 10)
	if err != nil || len(bad) != 0 || len(dropped) != 0 {
		t.Fatalf("reopen: bad lines %v dropped %d err %v", bad, len(dropped), err)
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
			q, _, _, err := openQueue(path, 3)
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
				q, _, _, err = openQueue(path, 3)
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
		wantDrops string  // the reports dropped at the opening
	}{
		{"missing file", "", 5, `{"n":9}`, nil, ""},
		{"torn last line", "{\"n\":0}\n{\"n\":1}\n{\"n\":", 5, `{"n":0} {"n":1} {"n":9}`, []int64{16}, ""},
		{"garbage line in the middle", "{\"n\":0}\nxx\n{\"n\":2}\n", 5, `{"n":0} {"n":2} {"n":9}`, []int64{8}, ""},
		{"report glued to a torn line", "{\"n\":0}\n{\"n\":{\"n\":2}\n{\"n\":3}\n", 5, `{"n":0} {"n":3} {"n":9}`, []int64{8}, ""},
		{"blank lines", "\n{\"n\":0}\n\n", 5, `{"n":0} {"n":9}`, nil, ""},
		// The head may have been sent by the process before: it is kept,
		// and the oldest after it go.
		{"more than the bound", "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n", 2, `{"n":0} {"n":9}`, nil, `{"n":1} {"n":2}`},
		{"the head and one more, bound 1", "{\"n\":0}\n{\"n\":1}\n", 1, `{"n":0} {"n":9}`, nil, ""},
		{"line over 16 MiB", "{\"n\":0}\n\"" + strings.Repeat("x", maxQueueLine) + "\"\n{\"n\":2}\n{\"n\":3}\n", 5,
			`{"n":0} {"n":2} {"n":3} {"n":9}`, []int64{8}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), queueFile)
			if tt.file != "" {
				if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			q, bad, dropped, err := openQueue(path, tt.max)
			if err != nil {
				t.Fatal(err)
			}
			var offsets []int64
			for _, b := range bad {
				offsets = append(offsets, b.offset)
			}
			var drops []string
			for _, it := range dropped {
				drops = append(drops, string(it.body))
			}
			if !slices.Equal(offsets, tt.wantBad) || strings.Join(drops, " ") != tt.wantDrops {
				t.Errorf("bad lines at %v, dropped %q; want %v, %q", offsets, drops, tt.wantBad, tt.wantDrops)
			}
			// A push after a torn line must start on a line of its own.
			if _, err := q.push(body(9)); err != nil {
				t.Fatal(err)
			}
			q, _, _, err = openQueue(path, tt.max+1)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(drain(t, q), " "); got != tt.want {
				t.Errorf("queue = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestQueueRejects(t *testing.T) {
	if _, _, _, err := openQueue("", 0); err == nil {
		t.Error("bound 0 accepted")
	}
	q, _, _, _ := openQueue("", 2)
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
		items, bad := parseQueue(b)
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
	q, _, _, err := openQueue(path, 10)
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
	q2, bad, _, err := openQueue(path, 10)
	if err != nil || len(bad) > 0 {
		t.Fatalf("reopen: %v %v", bad, err)
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
			q, _, _, err := openQueue(path, 3)
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
					if q, _, _, err = openQueue(path, 3); err != nil {
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
