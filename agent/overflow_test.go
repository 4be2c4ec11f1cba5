package agent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// losingPlatform is a protoPlatform on a loopback socket of its own,
// whose answers can be lost or whose socket can go away:
//
//   - "ok": the protocol's answers;
//   - "lose": the platform counts the report, then the connection is
//     reset instead of answered (a proxy's time-out, a crash after the
//     commit): the agent never learns that it was counted;
//   - "gone": the listening socket is closed, so connections are refused
//     and no report reaches the platform.
type losingPlatform struct {
	t    *testing.T
	p    protoPlatform
	srv  *http.Server
	addr string

	mu   sync.Mutex
	mode string
	ln   net.Listener // nil while gone
}

func newLosingPlatform(t *testing.T) *losingPlatform {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lp := &losingPlatform{t: t, addr: ln.Addr().String(), mode: "ok", ln: ln}
	lp.srv = &http.Server{Handler: lp, ReadHeaderTimeout: 5 * time.Second}
	go lp.srv.Serve(ln)
	t.Cleanup(func() { lp.srv.Close() })
	return lp
}

func (lp *losingPlatform) url() string { return "http://" + lp.addr + "/report" }

func (lp *losingPlatform) setMode(mode string) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.mode = mode
	if mode == "gone" && lp.ln != nil {
		lp.ln.Close()
		lp.ln = nil
	}
	if mode != "gone" && lp.ln == nil {
		for i := 0; ; i++ {
			ln, err := net.Listen("tcp", lp.addr)
			if err == nil {
				lp.ln = ln
				go lp.srv.Serve(ln)
				return
			}
			if i == 100 {
				lp.t.Fatalf("the platform cannot listen again on %s: %v", lp.addr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (lp *losingPlatform) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	lp.mu.Lock()
	mode := lp.mode
	lp.mu.Unlock()
	if mode != "lose" {
		lp.p.ServeHTTP(w, r)
		return
	}
	lp.p.ServeHTTP(httptest.NewRecorder(), r)
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		lp.t.Errorf("hijack: %v", err)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // a reset, not an orderly close
	}
	conn.Close()
}

var overflowLine = regexp.MustCompile(`reason=overflow run=(\w+) seqs=([\d,]+)`)

// TestOverflowNeverDropsAReportThePlatformMayHave: the platform counts
// the first report and its answer is lost; the queue then overflows. The
// report must not be dropped (the log and proofkit_agent_reports_dropped_total
// would say a reading was lost that the platform has): it stays at the
// head and is sent again, the platform answers that it has it, and the
// overflow drops the next oldest, which the platform never saw. So, as
// in the fault suite, each reading is counted once or logged as dropped,
// never both. The same holds for an agent started on the queue of one
// that may have sent its head and stopped before the answer, also when
// that queue holds more than the bound of 1 (the head and a report
// after it). A report that never left the agent (the connection was
// refused) is the oldest, and goes first, as ever.
func TestOverflowNeverDropsAReportThePlatformMayHave(t *testing.T) {
	for _, tt := range []struct {
		name  string
		max   int
		tries string // the platform's mode at each attempt to send the first report
		then  string // step: a reading; restart: a new agent on the state
		// the seqs the platform counts in the end, and those dropped
		counted, dropped string
	}{
		{"answer lost", 2, "lose", "step step", "1,3", "2"},
		{"answer lost, then connection refused", 2, "lose gone", "step step", "1,3", "2"},
		{"answer lost, agent started again", 2, "lose", "restart step step", "1,3", "2"},
		{"answer lost, bound 1, agent started again", 1, "lose", "step step restart step", "1,4", "2,3"},
		{"connection refused", 2, "gone", "step step", "2,3", "1"},
		// The new agent cannot tell: it keeps the head.
		{"connection refused, agent started again", 2, "gone", "restart step step", "1,3", "2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lp := newLosingPlatform(t)
			logs := &testkit.LogBuffer{}
			dir := t.TempDir()
			src := newFakeSource()
			open := func() *Agent {
				a, err := New(Config{
					Node: "n1", Source: src, StateDir: dir, QueueMax: tt.max, ReportURL: lp.url(), Token: "t",
					Interval: time.Hour, RetryMax: time.Hour,
					Logger: slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug})),
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { a.Close() })
				return a
			}
			step := func(a *Agent) {
				if _, err := a.Step(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			a := open()
			droppedTotal := 0.0
			closeAgent := func() {
				droppedTotal += testCounter(t, a, `proofkit_agent_reports_dropped_total{reason="overflow"}`)
				a.Close()
			}

			// The first report is sent and fails, once for each mode of
			// tries; then the reporter stops: nothing is sent while the
			// queue overflows.
			step(a)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			for i, mode := range strings.Fields(tt.tries) {
				lp.setMode(mode)
				if i == 0 {
					go func() { a.rep.run(ctx); close(done) }()
				}
				testkit.WaitFor(t, "an attempt failed", func() bool {
					return testCounter(t, a, "proofkit_agent_report_failures_total") >= float64(i+1)
				})
			}
			cancel()
			<-done
			if want := strings.Count(tt.tries, "lose"); len(lp.p.readings()) != want {
				t.Fatalf("the platform counted %d readings, want %d", len(lp.p.readings()), want)
			}
			for op := range strings.FieldsSeq(tt.then) {
				switch op {
				case "step":
					step(a)
				case "restart":
					closeAgent()
					a = open()
				default:
					lp.setMode(op)
				}
			}

			lp.setMode("ok")
			sendAll(t, a, 0)
			closeAgent()

			var counted []string
			count := make(map[uint64]int)
			for _, r := range lp.p.readings() {
				counted = append(counted, strconv.FormatUint(r.Seq, 10))
				count[r.Seq]++
			}
			var dropped []string
			for _, m := range overflowLine.FindAllStringSubmatch(logs.String(), -1) {
				for s := range strings.SplitSeq(m[2], ",") {
					dropped = append(dropped, s)
					if seq, _ := strconv.ParseUint(s, 10, 64); count[seq] > 0 {
						t.Errorf("seq %d counted by the platform and logged as dropped (overflow)", seq)
					}
				}
			}
			if got := strings.Join(counted, ","); got != tt.counted {
				t.Errorf("the platform counted seqs %s, want %s", got, tt.counted)
			}
			if got := strings.Join(dropped, ","); got != tt.dropped {
				t.Errorf("logged as dropped (overflow): seqs %s, want %s", got, tt.dropped)
			}
			if want := float64(len(dropped)); droppedTotal != want {
				t.Errorf("reports_dropped_total{reason=\"overflow\"} = %v, the log names %v", droppedTotal, want)
			}
		})
	}
}
