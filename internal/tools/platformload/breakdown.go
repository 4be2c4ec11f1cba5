package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The platform's CPU a report is split by a CPU profile of each replica
// over the measured time (its -debug-listen). A sample whose stack holds
// a transaction's commit is the commit's; any other goes to the part of
// the innermost function on its stack that marks one, so that JSON
// encoding called from the node's state encoding is the state's, and
// from the HTTP handler HTTP's; a sample of the runtime alone (the
// garbage collector, the scheduler) is GC and runtime's. The marks name
// the platform's functions as its packages have them, and as its single
// main package had them, so a profile of an older build splits alike.
var platformParts = []struct {
	name  string
	marks []string // substrings of a frame's function name
}{
	{"HTTP and JSON", []string{"net/http.", "platform/internal/api.handleReport", "platform/internal/api.writeJSON",
		"platform/internal/api.Handler", "main.handleReport", "main.writeJSON", "main.handler"}},
	{"state encoding", []string{"platform/internal/store.EncodeNode", "platform/internal/store.(*Rules).DecodeNode",
		"platform/internal/pgstore.encodeState", "platform/internal/pgstore.(*pgNode).addRoute",
		"main.encodeNode", "main.(*rules).decodeNode", "main.encodeState", "main.(*pgNode).addRoute",
		"overload.(*Tracker).MarshalJSON", "overload.(*Tracker).UnmarshalJSON",
		"overload.RestoreTracker", "pricing.(*History).MarshalJSON", "pricing.(*History).UnmarshalJSON"}},
	{"tracker", []string{"nodekit/overload."}},
	{"SQL round trips", []string{"github.com/jackc/pgx/", "github.com/jackc/puddle/"}},
	{"commit", []string{"pgx/v5.(*dbTx).Commit"}},
	{"plan", []string{"nodekit/routing.", "nodekit/pricing.", "platform/internal/fleet.(*Fleet).plan", "main.(*fleet).plan"}},
	{"GC and runtime", nil},
}

// fetchProfile takes a CPU profile of d seconds from a replica's
// /debug/pprof/profile into file.
func fetchProfile(ctx context.Context, debugURL string, d time.Duration, file string) error {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", debugURL, secs), nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: d + time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile: %s", resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// profileShares reads the profiles files of binary bin (go tool pprof
// -traces) and returns each part's share of their samples, and the
// samples' total CPU.
func profileShares(bin string, files []string) (map[string]float64, time.Duration, error) {
	out := map[string]float64{}
	var total time.Duration
	byPart := map[string]time.Duration{}
	for _, f := range files {
		cmd := exec.Command("go", append([]string{"tool", "pprof", "-traces"}, bin, f)...)
		b, err := cmd.Output()
		if err != nil {
			return nil, 0, fmt.Errorf("go tool pprof -traces %s: %w", f, err)
		}
		for _, tr := range parseTraces(b) {
			total += tr.value
			byPart[partOf(tr.frames)] += tr.value
		}
	}
	if total == 0 {
		return out, 0, nil
	}
	for k, v := range byPart {
		out[k] = float64(v) / float64(total)
	}
	return out, total, nil
}

// partOf is the part a sample's stack (leaf first) belongs to.
func partOf(frames []string) string {
	for _, f := range frames {
		if strings.Contains(f, "pgx/v5.(*dbTx).Commit") {
			return "commit"
		}
	}
	for _, f := range frames {
		for _, p := range platformParts {
			for _, m := range p.marks {
				if strings.Contains(f, m) {
					return p.name
				}
			}
		}
	}
	for _, f := range frames {
		if !strings.HasPrefix(f, "runtime.") {
			return "other"
		}
	}
	return "GC and runtime"
}

type trace struct {
	value  time.Duration
	frames []string
}

// parseTraces parses go tool pprof -traces: blocks separated by lines of
// dashes, each starting with the sample's value and its leaf function,
// then one caller a line.
func parseTraces(b []byte) []trace {
	var out []trace
	var cur *trace
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "-----------+") {
			cur = nil
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if cur == nil {
			if len(f) < 2 {
				continue
			}
			d, err := time.ParseDuration(f[0])
			if err != nil {
				continue // the header
			}
			out = append(out, trace{value: d, frames: []string{f[1]}})
			cur = &out[len(out)-1]
			continue
		}
		cur.frames = append(cur.frames, f[0])
	}
	return out
}

// serverProcesses is the CPU used so far by the cluster's processes
// (children of the postmaster pid), by kind: "backends" (client
// sessions: statements and their commits), and the server's own workers
// by the name they show (walwriter, checkpointer, autovacuum …).
func serverProcesses(pid int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, s := range allStats() {
		if s.pid != pid && s.ppid != pid {
			continue
		}
		k := serverKind(s.pid, pid)
		out[k] += s.cpu()
		out[k+kernelSuffix] += time.Duration(s.stime) * clockTick
		if s.pid == pid {
			// Processes that exited: autovacuum workers, closed sessions.
			out["exited"] += s.exitedCPU()
			out["exited"+kernelSuffix] += time.Duration(s.cstime) * clockTick
		}
	}
	return out
}

// kernelSuffix names, in serverProcesses' map, the part of a kind's CPU
// spent in the kernel (system time: system calls, fsync among them).
const kernelSuffix = " in the kernel"

func serverKind(p, postmaster int) string {
	if p == postmaster {
		return "postmaster"
	}
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "cmdline"))
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	s = strings.TrimPrefix(s, "postgres: ")
	switch {
	case strings.HasPrefix(s, "walwriter"):
		return "WAL writer"
	case strings.HasPrefix(s, "checkpointer"), strings.HasPrefix(s, "background writer"):
		return "checkpointer"
	case strings.HasPrefix(s, "autovacuum"):
		return "autovacuum"
	case strings.Contains(s, "127.0.0.1"), strings.Contains(s, "[local]"):
		return "backends"
	}
	return "other"
}

// dbCounters are the database's statement and commit counts so far
// (pg_stat_statements, if loaded; pg_stat_database).
type dbCounters struct {
	statements, commits int64
	stmtsKnown          bool
	walBytes, walFPI    int64 // pg_stat_wal: bytes written, full-page images among them
	// byStatement: calls of each statement (its text's start, spaces
	// folded) and the server's time in them; upd, hotUpd: the nodes
	// table's rows updated, and of those updated in place in their page
	// (HOT: no index entry written).
	byStatement map[string]stmtUse
	upd, hotUpd int64
}

// stmtUse is a statement's calls and the time the server spent in them
// (planning and running, lock waits included).
type stmtUse struct {
	calls int64
	time  time.Duration
}

// statementKey is how a statement is named in the breakdown: the start
// of its text, spaces folded.
func statementKey(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 60 {
		q = q[:60]
	}
	return q
}

func readCounters(ctx context.Context, url string) (dbCounters, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return dbCounters{}, err
	}
	defer conn.Close(ctx)
	var c dbCounters
	if err := conn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&c.commits); err != nil {
		return c, err
	}
	if err := conn.QueryRow(ctx, `SELECT wal_bytes::bigint, wal_fpi FROM pg_stat_wal`).Scan(&c.walBytes, &c.walFPI); err != nil {
		return c, err
	}
	err = conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%pg_stat%'`).Scan(&c.statements)
	c.stmtsKnown = err == nil
	if err := conn.QueryRow(ctx, `SELECT coalesce(n_tup_upd, 0), coalesce(n_tup_hot_upd, 0) FROM pg_stat_user_tables WHERE relname = 'nodes'`).Scan(&c.upd, &c.hotUpd); err != nil {
		c.upd, c.hotUpd = 0, 0
	}
	if c.stmtsKnown {
		rows, err := conn.Query(ctx, `SELECT query, calls, total_plan_time + total_exec_time FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%pg_stat%'`)
		if err == nil {
			c.byStatement = map[string]stmtUse{}
			var q string
			var n int64
			var ms float64
			_, err = pgx.ForEachRow(rows, []any{&q, &n, &ms}, func() error {
				u := c.byStatement[statementKey(q)]
				u.calls += n
				u.time += time.Duration(ms * float64(time.Millisecond))
				c.byStatement[statementKey(q)] = u
				return nil
			})
			if err != nil {
				c.byStatement = nil
			}
		}
	}
	return c, nil
}

// waitSampler samples pg_stat_activity every tick while it runs: what
// the database's sessions are doing, by wait event ("CPU" for a session
// running a statement and waiting on nothing), so that a figure says how
// many sessions were, on average, waiting on what.
type waitSampler struct {
	mu      sync.Mutex
	counts  map[string]int
	samples int
	queries int // its own transactions, not to be counted as the platform's
	stop    chan struct{}
	done    chan struct{}
}

func startWaits(ctx context.Context, url string, tick time.Duration) (*waitSampler, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	w := &waitSampler{counts: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			w.mu.Lock()
			w.queries++
			w.mu.Unlock()
			rows, err := conn.Query(ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*)
				FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()
				GROUP BY 1`)
			if err != nil {
				continue
			}
			w.mu.Lock()
			w.samples++
			for rows.Next() {
				var k string
				var n int
				if rows.Scan(&k, &n) == nil {
					w.counts[k] += n
				}
			}
			w.mu.Unlock()
			rows.Close()
		}
	}()
	return w, nil
}

// end stops sampling and returns the mean sessions in each state, the
// largest first, and the transactions it ran.
func (w *waitSampler) end() (string, int) {
	close(w.stop)
	<-w.done
	s := w.summary()
	return s, w.queries
}

func (w *waitSampler) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.samples == 0 {
		return "?"
	}
	keys := make([]string, 0, len(w.counts))
	for k := range w.counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return w.counts[b] - w.counts[a] })
	var parts []string
	for _, k := range keys {
		m := float64(w.counts[k]) / float64(w.samples)
		if m < 0.05 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", k, m))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// createStatements creates pg_stat_statements in the run's database, if
// the server loaded it, so its counts can be read there.
func createStatements(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var loaded bool
	if err := conn.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%'`).Scan(&loaded); err != nil || !loaded {
		return err
	}
	_, err = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	return err
}

// analyze has the database at url ANALYZE its tables (every session's
// cached plans of statements on them are made again at their next run).
func analyze(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `ANALYZE`); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// breakdown is where a run's CPU went, a line a side: nothing when it was
// not measured.
func (r *result) breakdown() []string {
	var out []string
	if r.Acked == 0 {
		return nil
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(r.Acked) / float64(time.Millisecond) }
	if len(r.platformParts) > 0 {
		total := per(r.platformCPU)
		var parts []string
		for _, p := range platformParts {
			parts = append(parts, fmt.Sprintf("%s %.3f", p.name, total*r.platformParts[p.name]))
		}
		if o := r.platformParts["other"]; o > 0 {
			parts = append(parts, fmt.Sprintf("other %.3f", total*o))
		}
		out = append(out, fmt.Sprintf("platform %.3f ms a report: %s", total, strings.Join(parts, ", ")))
	}
	if len(r.serverKinds) > 0 {
		var parts []string
		for _, k := range []string{"backends", "WAL writer", "checkpointer", "autovacuum", "exited", "postmaster", "other"} {
			if d := r.serverKinds[k]; d > 0 {
				parts = append(parts, fmt.Sprintf("%s %.3f (%.3f in the kernel)", k, per(d), per(r.serverKinds[k+kernelSuffix])))
			}
		}
		line := fmt.Sprintf("PostgreSQL %.3f ms a report: %s", per(r.serverCPU), strings.Join(parts, ", "))
		line += fmt.Sprintf("; WAL %.0f bytes and %.3f full pages a report", float64(r.walBytes)/float64(r.Acked), float64(r.walFPI)/float64(r.Acked))
		if r.stmtsKnown {
			line += fmt.Sprintf("; %.2f statements and %.3f commits a report", float64(r.statements)/float64(r.Acked), float64(r.commits)/float64(r.Acked))
		} else {
			line += fmt.Sprintf("; %.3f commits a report", float64(r.commits)/float64(r.Acked))
		}
		out = append(out, line)
		if r.upd > 0 {
			out = append(out, fmt.Sprintf("nodes' rows: %.3f updated a report, %.1f %% of them in place (HOT)", float64(r.upd)/float64(r.Acked), 100*float64(r.hotUpd)/float64(r.upd)))
		}
		type stmt struct {
			q string
			u stmtUse
		}
		var top []stmt
		for q, u := range r.byStatement {
			top = append(top, stmt{q, u})
		}
		slices.SortFunc(top, func(a, b stmt) int { return cmp.Or(cmp.Compare(b.u.time, a.u.time), cmp.Compare(b.u.calls, a.u.calls)) })
		for _, s := range top[:min(len(top), 10)] {
			out = append(out, fmt.Sprintf("  %.3f a report, %.4f ms: %s", float64(s.u.calls)/float64(r.Acked), per(s.u.time), s.q))
		}
	}
	if r.waits != "" {
		out = append(out, "sessions (mean): "+r.waits)
	}
	if len(r.rss) > 0 {
		var m []string
		for _, b := range r.rss {
			m = append(m, fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)))
		}
		out = append(out, "replicas' resident memory at the end: "+strings.Join(m, ", "))
	}
	if r.steal > 0 {
		// A shared machine's hypervisor gave the time to others: the
		// run's CPU figures are then less comparable with another's.
		out = append(out, fmt.Sprintf("machine: %.1f %% of its CPU time stolen by the hypervisor in the measured time", 100*r.steal))
	}
	if r.perfTop != "" {
		out = append(out, "PostgreSQL by function (perf):")
		out = append(out, strings.Split(r.perfTop, "\n")...)
	}
	return out
}

// keepProfiles copies a run's profiles from runDir into dir.
func keepProfiles(runDir, dir string, replicas, nodes int) error {
	files, _ := filepath.Glob(filepath.Join(runDir, "cpu-*.pprof"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		i := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "cpu-"), ".pprof")
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d-%d-%s.pprof", replicas, nodes, i)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// perfServer records the PostgreSQL processes' CPU (perf record) for d
// into file; report prints the functions that took the most of it.
func perfServer(ctx context.Context, postmaster int, d time.Duration, file string) (wait func() error) {
	var pids []string
	for _, s := range allStats() {
		if s.ppid == postmaster {
			pids = append(pids, strconv.Itoa(s.pid))
		}
	}
	cmd := exec.CommandContext(ctx, "perf", "record", "-F", "499", "-g", "-o", file, "-p", strings.Join(pids, ","), "--", "sleep", strconv.Itoa(int(d.Seconds())))
	if err := cmd.Start(); err != nil {
		return func() error { return err }
	}
	return cmd.Wait
}

// perfTop is the top of perf report of file: the functions with at
// least 2 % of the samples, by themselves.
func perfTop(file string) (string, error) {
	out, err := exec.Command("perf", "report", "-i", file, "--stdio", "--no-children", "--sort", "dso,symbol", "--percent-limit", "2", "-g", "none").Output()
	if err != nil {
		return "", err
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			lines = append(lines, t)
		}
	}
	return strings.Join(lines, "\n"), nil
}

// rssOf is process pid's resident memory (VmRSS), 0 if unknown.
func rssOf(pid int) uint64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
