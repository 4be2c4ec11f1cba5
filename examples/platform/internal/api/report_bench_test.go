package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// quietStore answers every report as counted, not overloaded, and does
// nothing else: what is left of a report's cost is the HTTP and JSON.
type quietStore struct {
	store.Store
	r *store.Rules
}

func (q quietStore) Base() *store.Rules { return q.r }

func (quietStore) Report(context.Context, string, store.ReportRun) (*overload.Notice, error) {
	return nil, nil
}

// benchFleet is the tokens of n nodes ("n0"…), one each, beside the
// operator's, and the handler as run() wires it.
func benchFleet(n int) (http.Handler, Tokens) {
	toks := Tokens{platformtest.TestToken: ""}
	for i := range n {
		toks["tok-"+strconv.Itoa(i)] = "n" + strconv.Itoa(i)
	}
	r, err := store.NewRules(store.Config{})
	if err != nil {
		panic(err)
	}
	return atCap(Handler(fleet.New(quietStore{r: &r}, nil), toks), 1000), toks
}

// benchReadings are the bodies the benchmarks post: platformload's (what
// a 100,000-node run sends) and an agent's with links, listeners and
// notes.
var benchReadings = []struct {
	name string
	r    overload.Reading
}{
	{"load", overload.Reading{
		Version: overload.ReadingVersion, Node: "n7", At: platformtest.T0, Run: "4f1c2a9be0d34c5e8a6b7c9d0e1f2a3b", Seq: 812,
		MemoryUsedPercent: 61.25, CPUs: 4, Load15: 1.5, ConntrackEntries: 1000, ConntrackMax: 262144,
		Missing: []overload.Input{overload.InputBandwidth},
	}},
	{"agent", overload.Reading{
		Version: overload.ReadingVersion, Node: "n7", At: platformtest.T0.Add(123456789), Run: "4f1c2a9be0d34c5e8a6b7c9d0e1f2a3b", Seq: 812,
		MemoryUsedPercent: 61.25, CPUs: 8, Load15: 3.75, ConntrackEntries: 52311, ConntrackMax: 262144,
		ConntrackDrops: 0, ListenDrops: 2,
		Listeners: []overload.Listener{{Addr: "0.0.0.0:443", Queue: 3, Backlog: 4096}, {Addr: "[::]:443", Backlog: 4096}},
		Links:     []overload.Link{{Name: "eth0", RxBitsPerSecond: 3.1e8, TxBitsPerSecond: 2.9e8, SpeedMbps: 1000}, {Name: "wg0", RxBitsPerSecond: 1.2e6, TxBitsPerSecond: 9.5e5}},
		Missing:   []overload.Input{overload.InputConntrackDrops},
		Notes:     []string{"conntrack drops: no CAP_NET_ADMIN, read /proc/net/stat/nf_conntrack"},
	}},
}

// BenchmarkReportHandler: one POST /report through the handler, as
// run() wires it, with a node's token, to a store that does nothing:
// the handler's own CPU and allocations a report (net/http's server
// loop left out; see BenchmarkReportServer).
func BenchmarkReportHandler(b *testing.B) {
	h, _ := benchFleet(1000)
	for _, br := range benchReadings {
		b.Run(br.name, func(b *testing.B) {
			send, w, size := reportCall(b, h, br.r)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				send()
				if w.code != 200 {
					b.Fatalf("status %d: %s", w.code, w.body.Bytes())
				}
			}
		})
	}
}

// reportCall prepares a POST /report of r with node 7's token to h, and
// returns what sends it once (allocating nothing of its own but the
// body's NopCloser), the writer that takes the answer, and the body's
// size.
func reportCall(tb testing.TB, h http.Handler, r overload.Reading) (send func(), w *benchWriter, size int) {
	tb.Helper()
	body, err := json.Marshal(r)
	if err != nil {
		tb.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/report", nil)
	req.Header.Set("Authorization", "Bearer tok-7")
	req.Header.Set("Content-Type", "application/json")
	w = &benchWriter{h: http.Header{}}
	rd := bytes.NewReader(body)
	send = func() {
		rd.Reset(body)
		req.Body = io.NopCloser(rd)
		req.ContentLength = int64(len(body))
		w.reset()
		h.ServeHTTP(w, req)
	}
	return send, w, len(body)
}

// benchWriter is an http.ResponseWriter that keeps the status and the
// body, and allocates nothing once warm (httptest.ResponseRecorder
// allocates a header map and more a request, which would hide the
// handler's own).
type benchWriter struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *benchWriter) Write(p []byte) (int, error) {
	w.WriteHeader(200)
	return w.body.Write(p)
}
func (w *benchWriter) reset() {
	clear(w.h)
	w.code = 0
	w.body.Reset()
}

// BenchmarkReportServer: one POST /report over a kept-alive loopback
// connection to an http.Server as run() sets it up, from a client that
// writes prepared bytes and reads the answer without allocating: the
// allocations a report are the server's.
func BenchmarkReportServer(b *testing.B) {
	h, _ := benchFleet(1000)
	for _, br := range benchReadings {
		b.Run(br.name, func(b *testing.B) {
			body, err := json.Marshal(br.r)
			if err != nil {
				b.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: h, ConnContext: connContext, ReadHeaderTimeout: ReadHeaderTimeout,
				MaxHeaderBytes: maxHeaderBytes, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
			go srv.Serve(NewCapListener(ln, 1000, nil))
			defer srv.Close()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			// The request as Go's client sends it.
			req := fmt.Appendf(nil, "POST /report HTTP/1.1\r\nHost: %s\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: %d\r\n"+
				"Authorization: Bearer tok-7\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n%s", ln.Addr(), len(body), body)
			br := bufio.NewReaderSize(c, 4096)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if err := readAnswer(br); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// readAnswer reads one HTTP/1.1 answer of status 200 with a
// Content-Length, and discards it.
func readAnswer(br *bufio.Reader) error {
	n := -1
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if first && !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
			return fmt.Errorf("answer %q", line)
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			n = 0
			for _, c := range bytes.TrimSpace(v) {
				n = n*10 + int(c-'0')
			}
		}
	}
	if n < 0 {
		return fmt.Errorf("answer without Content-Length")
	}
	_, err := br.Discard(n)
	return err
}

// TestReportAllocs: a report through the handler (BenchmarkReportHandler's
// load case) allocates no more than it did when the figure was measured:
// the timeout's context (4), the reading's node, run and missing list,
// the use case's take and plan (fleet's reportRun, one value rather
// than two closures and the reading they captured: 12 allocations
// before), and the test's own NopCloser: 9 (the run's string is
// sometimes shared).
func TestReportAllocs(t *testing.T) {
	if testkit.BuiltWithRace(t) {
		t.Skip("the race detector allocates")
	}
	h, _ := benchFleet(10)
	send, w, _ := reportCall(t, h, benchReadings[0].r)
	allocs := testing.AllocsPerRun(200, send)
	if w.code != 200 {
		t.Fatalf("status %d: %s", w.code, w.body.Bytes())
	}
	if allocs > 9 {
		t.Errorf("%v allocations a report, want 9 at most", allocs)
	}
	t.Logf("%v allocations a report", allocs)
}

// BenchmarkReportAnswer: the answer to a quiet report, written by hand
// (appendPlainAnswer) beside writeJSON, side by side in one run; and a
// check that both write the same bytes.
func BenchmarkReportAnswer(b *testing.B) {
	out := fleet.ReportOutcome{Node: "de-fra-1"}
	w := &benchWriter{h: http.Header{}}
	writeJSON(w, http.StatusOK, out)
	if got := appendPlainAnswer(nil, out, false); !bytes.Equal(got, w.body.Bytes()) {
		b.Fatalf("by hand %q, writeJSON %q", got, w.body.Bytes())
	}
	b.Run("by-hand", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			buf = appendPlainAnswer(buf[:0], out, false)
		}
	})
	b.Run("writeJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w.reset()
			writeJSON(w, http.StatusOK, out)
		}
	})
}
