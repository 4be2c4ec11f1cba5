package api

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
)

// noticeStore is a store of notices alone, numbered ids, each of node
// nodes[id].
type noticeStore struct {
	store.Store
	ids   []int64 // sorted
	nodes map[int64]string
	reads int
}

func (s *noticeStore) Notices(_ context.Context, after int64, limit int) ([]store.NumberedNotice, int64, error) {
	s.reads++
	out := []store.NumberedNotice{}
	i, _ := slices.BinarySearch(s.ids, after+1)
	for ; i < len(s.ids) && len(out) < limit; i++ {
		out = append(out, store.NumberedNotice{ID: s.ids[i], Notice: overload.Notice{Node: s.nodes[s.ids[i]]}})
	}
	last := after
	if len(out) > 0 {
		last = out[len(out)-1].ID
	}
	return out, last, nil
}

// TestDashboardNewestNotices: the page's notices are the operator's
// newest, newest first, found without reading every notice the platform
// holds: the last notice's id in a few dozen reads, then windows back
// from it.
func TestDashboardNewestNotices(t *testing.T) {
	for _, total := range []int64{0, 1, 999, 1000, 1001, 123_457} {
		st := &noticeStore{nodes: map[int64]string{}}
		for id := int64(1); id <= total; id++ {
			if id%97 == 0 {
				continue // a gap, as a sequence may leave
			}
			st.ids = append(st.ids, id)
			st.nodes[id] = "b1"
			if id%7 == 0 {
				st.nodes[id] = "a1"
			}
		}
		d := &dashboard{f: &fleet.Fleet{Store: st}}
		last, err := d.lastNotice(t.Context())
		want := int64(0)
		if len(st.ids) > 0 {
			want = st.ids[len(st.ids)-1]
		}
		if err != nil || last != want {
			t.Errorf("%d notices: the last is %d (%v), want %d", total, last, err, want)
		}
		if st.reads > 64 {
			t.Errorf("%d notices: the last found in %d reads", total, st.reads)
		}
		lastReads := st.reads
		st.reads = 0
		ns, err := d.newestNotices(t.Context(), func(node string) bool { return node == "a1" })
		if err != nil {
			t.Fatal(err)
		}
		var wantIDs, got []int64
		for i := len(st.ids) - 1; i >= 0 && len(wantIDs) < dashboardNotices; i-- {
			if st.nodes[st.ids[i]] == "a1" {
				wantIDs = append(wantIDs, st.ids[i])
			}
		}
		for _, n := range ns {
			got = append(got, n.ID)
		}
		if !slices.Equal(got, wantIDs) {
			t.Errorf("%d notices: alice's newest are %v, want %v", total, got, wantIDs)
		}
		t.Logf("%d notices: the last found in %d reads; alice's newest, the last included, in %d", total, lastReads, st.reads)
		if total > 100_000 && st.reads > 64 {
			t.Errorf("%d notices: alice's newest read in %d reads", total, st.reads)
		}
	}
}

// TestMaxConnsForFiles: the default -max-conns leaves a tenth of the
// open-file limit, at least 64, and the spares over the cap.
func TestMaxConnsForFiles(t *testing.T) {
	for _, tc := range []struct {
		nofile uint64
		want   int
	}{{0, 1}, {10, 1}, {80, 1}, {82, 2}, {256, 176}, {1024, 906}, {20000, 17984}, {1 << 20, 943703}} {
		if got := MaxConnsForFiles(tc.nofile); got != tc.want {
			t.Errorf("maxConnsForFiles(%d) = %d, want %d", tc.nofile, got, tc.want)
		}
	}
}

// FuzzParseTokens: any token file either parses into tokens whose nodes
// are valid node names, or is refused with an error; never a panic.
func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{"op\n", "op\nagent x1\n", "# c\n\n a  b \n", "a b c", "a\na", "a ../x", "\x00 \xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		toks, err := parseTokens(strings.NewReader(s))
		if err != nil {
			return
		}
		if len(toks) == 0 {
			t.Fatal("no error and no token")
		}
		for tok, node := range toks {
			if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
				t.Fatalf("token %q", tok)
			}
			if node != "" && store.CheckNodeID(node) != nil {
				t.Fatalf("node %q", node)
			}
		}
	})
}

func TestParseTokens(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Tokens
		err  string
	}{
		{"op\n# comment\n\nagent1 x1\n", Tokens{"op": "", "agent1": "x1"}, ""},
		{"  op  \r\n", Tokens{"op": ""}, ""},
		{"", nil, "no token"},
		{"a x1 extra", nil, "line 1"},
		{"a\na x1", nil, "twice"},
		{"a ../x", nil, "node"},
		{"adm\nal operator:alice\nag x1 operator:alice\n", Tokens{"adm": "", "al": "operator:alice", "ag": "x1 operator:alice"}, ""},
		{"a\tx1\t operator:alice", Tokens{"a": "x1 operator:alice"}, ""},
		{"a operator:", nil, "the operator's name: want 1 to 64"},
		{"a x1 alice", nil, "operator:NAME"},
		{"a operator:alice x1", nil, "want TOKEN"},
		{"a x1 operator:bob\nb x1 operator:carol", nil, "node x1 is named operator"},
		// A line whose token was left out is not the admin's token
		// "operator:alice", which anyone could guess.
		{"adm\noperator:alice\n", nil, "line 2: no token before operator:alice"},
		{"operator:alice x1", nil, "line 1: no token before operator:alice"},
		{"a operator:a:b", nil, "the operator's name: want 1 to 64"},
		// A line the wrong way round, its token where the node goes:
		// the error, printed and logged, does not repeat it.
		{"adm\nde-fra-1 Qm3+/SeCrEt=\n", nil, "line 2: the field after the token is neither a node"},
		{"adm\nQm3+/SeCrEt= de-fra-1 SeCrEt2\n", nil, "line 2: the field after the node: want operator:NAME"},
	} {
		got, err := parseTokens(strings.NewReader(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "SeCrEt") {
				t.Errorf("%q: err %v repeats a token", tc.in, err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%q: token %s → %q, want %q", tc.in, k, got[k], v)
			}
		}
	}
	for tok, want := range map[string]identity{"adm": {}, "al": {operator: "alice"}, "ag": {node: "x1", operator: "alice"}, "x": {node: "x1"}} {
		x := Tokens{"adm": "", "al": "operator:alice", "ag": "x1 operator:alice", "x": "x1"}.index()
		if got, ok := x.lookup("Bearer " + tok); !ok || got != want {
			t.Errorf("token %s: %+v %v, want %+v", tok, got, ok, want)
		}
	}
	toks := Tokens{"abc": "x1"}.index()
	for h, ok := range map[string]bool{"Bearer abc": true, "bearer abc": true, "BEARER abc": true, "Bearer ab": false, "Bearer": false, "Basic abc": false, "abc": false, "": false, "Bearer abcd": false} {
		if _, got := toks.lookup(h); got != ok {
			t.Errorf("lookup(%q) = %v, want %v", h, got, ok)
		}
	}
}
