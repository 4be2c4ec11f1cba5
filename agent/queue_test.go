package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func body(i int) []byte { return fmt.Appendf(nil, `{"n":%d}`, i) }

func drain(t *testing.T, q *queue) []string {
	t.Helper()
	var out []string
	for {
		seq, b, ok := q.head()
		if !ok {
			return out
		}
		out = append(out, string(b))
		if err := q.remove(seq); err != nil {
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
	seq, _, _ := q.head()
	if err := q.remove(seq); err != nil {
		t.Fatal(err)
	}
	q2, torn, dropped, err := openQueue(path, 10)
	if err != nil || torn != 0 || dropped != 0 {
		t.Fatalf("reopen: torn %d dropped %d err %v", torn, dropped, err)
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
				total += d
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
		name                string
		file                string
		max                 int
		want                string // after opening and pushing {"n":9}
		wantTorn, wantDrops int
	}{
		{"missing file", "", 5, `{"n":9}`, 0, 0},
		{"torn last line", "{\"n\":0}\n{\"n\":1}\n{\"n\":", 5, `{"n":0} {"n":1} {"n":9}`, 1, 0},
		{"garbage line in the middle", "{\"n\":0}\nxx\n{\"n\":2}\n", 5, `{"n":0} {"n":2} {"n":9}`, 1, 0},
		{"blank lines", "\n{\"n\":0}\n\n", 5, `{"n":0} {"n":9}`, 0, 0},
		{"more than the bound", "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n", 2, `{"n":2} {"n":9}`, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), queueFile)
			if tt.file != "" {
				if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			q, torn, dropped, err := openQueue(path, tt.max)
			if err != nil {
				t.Fatal(err)
			}
			if torn != tt.wantTorn || dropped != tt.wantDrops {
				t.Errorf("torn %d dropped %d, want %d %d", torn, dropped, tt.wantTorn, tt.wantDrops)
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
		items, torn := parseQueue(b)
		if torn < 0 {
			t.Fatal("negative torn count")
		}
		for _, it := range items {
			if len(it) == 0 || strings.ContainsRune(string(it), '\n') {
				t.Fatalf("item %q is not one line", it)
			}
		}
	})
}
