// Command platformload measures the example platform at fleet scale: it
// simulates N agents, each reporting every 30 s over real HTTP with the
// real wire format (version 2 readings, run and seq) and its own node
// token, to 1 or 2 replicas of the built examples/platform on one local
// PostgreSQL (a throwaway cluster it starts), or to the file store. Some
// nodes' readings go over 90 % memory in 3 of every 6 readings, so they
// enter overload and leave it (events, notices, plan closures).
//
// An agent sends its readings one at a time, in order, retrying a reading
// after a 5xx or a connection error (on the next replica, as behind a load
// balancer); a reading whose slot comes while the previous one is still
// unanswered waits, as in the agent's queue. Latency runs from a reading's
// slot to its acknowledgement, retries and waiting included.
//
// It is a benchmark harness, not a test: run it alone, under the lock the
// machine's benchmarks share:
//
//	flock /tmp/bench.lock go run ./internal/tools/platformload -nodes 1000,10000 -replicas 1,2
//	flock /tmp/bench.lock go run ./internal/tools/platformload -store file -nodes 1000,2000
//
// For each store and replica count it runs each N (stopping at the first
// whose p99 is over -p99) and prints one line per run: reports/s acknowledged,
// p50, p99 and max latency, retries, late readings, the CPU a report of the
// replicas and of PostgreSQL, and the machine's load average before and
// after. Under it, for PostgreSQL, where that CPU went:
//
//   - the replicas' CPU, split by a CPU profile of each replica over the
//     measured time (its -debug-listen): each sample goes to the first of
//     commit, SQL round trips, state encoding, tracker, plan, HTTP and
//     JSON, GC and runtime whose functions are on its stack;
//   - PostgreSQL's CPU by process (/proc): the backends, which run the
//     statements and their commits, and the server's own workers (WAL
//     writer, checkpointer, autovacuum);
//   - statements and commits a report (pg_stat_statements,
//     pg_stat_database), and what the database's sessions were doing,
//     sampled from pg_stat_activity every 100 ms: running ("CPU") or
//     waiting, by wait event (Lock:transactionid, Lock:advisory,
//     LWLock:WALWrite, IO:WALSync …), as the mean number of sessions.
//
// Half-way through the warm-up, once every node's row exists, it has the
// database ANALYZE its tables, as autovacuum does within a minute or two
// of a fleet's start: each of the platform's sessions plans a statement
// once (plan_cache_mode force_generic_plan), and a plan made in the
// run's first seconds, on tables the planner takes for nearly empty,
// would read whole tables (a hash join over nodes) until the statistics
// change. The measured time sees the plans of a fleet's steady state.
//
// With -platform floor it builds and runs ./floor instead of the
// platform: a server that does for each report what the platform does
// before its store (net/http, the token, the body, the reading decoded,
// the answer) and nothing else. Its CPU a report is what any Go platform
// on net/http pays on this machine, the part of the platform's that no
// change to the platform's own work can take away.
//
// The warm-up is two intervals by default, so that every node has
// reported twice before the measured time and the nodes driven into
// overload (3 readings in 6 over 90 % memory, from their first) start
// their overload in it: events, notices and plan closures are measured.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/proofkit/nodekit/internal/testing/pgtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "platformload: %v\n", err)
		os.Exit(1)
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q: want positive whole numbers, comma-separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("platformload", flag.ContinueOnError)
	nodesFlag := fs.String("nodes", "1000,2000,5000,10000,20000,50000,100000", "fleet sizes to run, in order")
	replicasFlag := fs.String("replicas", "1,2", "replica counts to run (postgres store)")
	store := fs.String("store", "postgres", "store: postgres or file")
	interval := fs.Duration("interval", 30*time.Second, "time between one node's readings")
	measure := fs.Duration("measure", 60*time.Second, "time measured, after the warm-up")
	warm := fs.Duration("warm", 0, "warm-up before the measured time (0: two intervals)")
	platformBin := fs.String("platform", "", "a built platform binary to measure (default: build examples/platform from this checkout); floor: the yardstick in ./floor, net/http's work for a report and nothing else")
	profile := fs.Bool("profile", true, "take a CPU profile of each replica over the measured time (-debug-listen) to split its CPU")
	perf := fs.Bool("perf", false, "record PostgreSQL's processes with perf over the measured time and print the functions that took the most CPU (perturbs the figures)")
	profileDir := fs.String("profile-dir", "", "keep each run's profiles in this directory, as REPLICAS-NODES-I.pprof (default: removed with the run)")
	p99 := fs.Duration("p99", 250*time.Millisecond, "the p99 a fleet size must hold; larger sizes are not run once one fails")
	overloadEvery := fs.Int("overload-every", 10, "every this many-th node goes in and out of overload")
	notify := fs.Bool("notify", false, "deliver the notices to a receiver (a -notify-file of one * line) and print their latency, from decision to 2xx")
	var pgSet []string
	fs.Func("pg-set", "a PostgreSQL setting name=value for the run's cluster, beside and over serverSettings (repeatable)", func(v string) error {
		pgSet = append(pgSet, v)
		return nil
	})
	var platformArgs []string
	fs.Func("platform-arg", "an argument for each replica, beside the load's own (repeatable: -platform-arg -db-workers -platform-arg 2)", func(v string) error {
		platformArgs = append(platformArgs, v)
		return nil
	})
	split := fs.String("split", "", "only split the CPU of the profiles named by the arguments, of this platform binary, into the parts below, and print each part's share")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *split != "" {
		sh, total, err := profileShares(*split, fs.Args())
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%v of samples:", total)
		for _, p := range append(platformParts, struct {
			name  string
			marks []string
		}{name: "other"}) {
			fmt.Fprintf(stdout, " %s %.1f%%", p.name, 100*sh[p.name])
		}
		fmt.Fprintln(stdout)
		return nil
	}
	nodes, err := ints(*nodesFlag)
	if err != nil {
		return fmt.Errorf("-nodes %w", err)
	}
	reps, err := ints(*replicasFlag)
	if err != nil {
		return fmt.Errorf("-replicas %w", err)
	}
	if *store != "postgres" && *store != "file" {
		return fmt.Errorf("-store %q: want postgres or file", *store)
	}
	if *store == "file" {
		reps = []int{1} // the file store is one process
	}
	dir, err := os.MkdirTemp("", "nk-platformload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := *platformBin
	if bin == "" || bin == "floor" {
		pkg := platformPkg
		if bin == "floor" {
			pkg = floorPkg
		}
		if bin, err = buildPlatform(dir, pkg); err != nil {
			return err
		}
	}
	if *warm <= 0 {
		*warm = 2 * *interval
	}
	var cluster *pgtest.Cluster
	if *store == "postgres" {
		if cluster, err = pgtest.Start(append(slices.Clone(serverSettings), pgSet...)...); err != nil {
			return err
		}
		defer cluster.Stop()
	}
	fmt.Fprintf(stdout, "store     replicas   nodes  reports/s    p50     p99     max  retries  late  refused  CPU/report platform+postgres  load avg (1m) before→after\n")
	for _, r := range reps {
		for _, n := range nodes {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			before := loadAvg()
			var h *hook
			if *notify {
				if h, err = startHook(); err != nil {
					return err
				}
			}
			runDir := filepath.Join(dir, fmt.Sprintf("run-%d-%d", r, n))
			res, err := oneRun(ctx, bin, cluster, runDir, r, n,
				loadConfig{nodes: n, interval: *interval, warm: *warm, measure: *measure, overloadEvery: *overloadEvery}, h, *profile, platformArgs, *perf)
			if h != nil {
				defer h.close()
			}
			if err != nil {
				return fmt.Errorf("%s, %d replicas, %d nodes: %w", *store, r, n, err)
			}
			refused := int64(0)
			for _, c := range res.Refused {
				refused += c
			}
			fmt.Fprintf(stdout, "%-9s %8d %7d %10.0f %6s %7s %7s %8d %5d %8d  %s+%s  %s→%s\n", *store, r, n, res.rate(),
				ms(res.P50), ms(res.P99), ms(res.Max), res.Retries, res.Late, refused,
				perReport(res.platformCPU, res.Acked), perReport(res.serverCPU, res.Acked), before, loadAvg())
			if *profileDir != "" {
				if err := keepProfiles(runDir, *profileDir, r, n); err != nil {
					return err
				}
			}
			for _, l := range res.breakdown() {
				fmt.Fprintf(stdout, "          %s\n", l)
			}
			if h != nil {
				fmt.Fprintf(stdout, "          %s\n", h.summary())
			}
			if res.P99 > *p99 || res.Acked < res.Sent*99/100 {
				break
			}
		}
	}
	return nil
}

// serverSettings are the throwaway cluster's settings beside its
// defaults: statement counts, and room for a write-heavy load (shared
// buffers for the fleet's rows, WAL buffers and checkpoint spacing).
// Durability is the default's: synchronous_commit and fsync stay on, so
// an acknowledged reading survives a crash.
var serverSettings = []string{
	"shared_preload_libraries=pg_stat_statements",
	"shared_buffers=1GB",
	"wal_buffers=16MB",
	"max_wal_size=8GB",
	"min_wal_size=1GB",
	"checkpoint_timeout=30min",
}

func perReport(cpu time.Duration, n int64) string {
	if n == 0 {
		return "?"
	}
	return fmt.Sprintf("%.2fms", float64(cpu)/float64(n)/float64(time.Millisecond))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// oneRun starts the replicas on a fresh database (or state directory),
// runs the load and stops them.
func oneRun(ctx context.Context, bin string, cluster *pgtest.Cluster, dir string, replicas, nodes int, cfg loadConfig, h *hook, profile bool, extra []string, perf bool) (*result, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tokens, routes, err := writeFleet(dir, nodes, time.Now())
	if err != nil {
		return nil, err
	}
	args := append([]string{"-token-file", tokens, "-routes", routes}, extra...)
	if h != nil {
		file := filepath.Join(dir, "notify")
		if err := h.writeFile(file); err != nil {
			return nil, err
		}
		args = append(args, "-notify-file", file)
	}
	url := ""
	if cluster != nil {
		if url, err = cluster.CreateDatabase(); err != nil {
			return nil, err
		}
		args = append(args, "-db", url+"&pool_max_conns=32")
		if profile {
			args = append(args, "-debug-listen", "127.0.0.1:0")
		}
	} else {
		args = append(args, "-state-dir", filepath.Join(dir, "state"))
	}
	var reps []*replica
	defer func() {
		for _, r := range reps {
			r.kill()
		}
	}()
	for range replicas {
		r, err := startReplica(ctx, bin, args...)
		if err != nil {
			return nil, err
		}
		reps = append(reps, r)
		cfg.urls = append(cfg.urls, r.URL)
	}
	var pids []int
	for _, r := range reps {
		pids = append(pids, r.cmd.Process.Pid)
	}
	server := 0
	if cluster != nil {
		server, _ = cluster.ServerPID()
	}
	// The CPU of the measured part: from the end of the warm-up to the
	// end of the run.
	serverCPU := func() time.Duration {
		if server == 0 {
			return 0
		}
		return cpuTime([]int{server}, true)
	}
	var p0, s0 time.Duration
	var m0, st0 int64
	var kinds0 map[string]time.Duration
	var c0 dbCounters
	var waits *waitSampler
	var profiles []string
	var profWG sync.WaitGroup
	var perfWait func() error
	perfFile := filepath.Join(dir, "perf.data")
	cfg.atMeasure = func() {
		if perf && server != 0 {
			perfWait = perfServer(ctx, server, cfg.measure, perfFile)
		}
		p0, s0 = cpuTime(pids, false), serverCPU()
		m0, st0 = machineCPU()
		if url == "" {
			return
		}
		kinds0 = serverProcesses(server)
		c0, _ = readCounters(ctx, url)
		waits, _ = startWaits(ctx, url, 100*time.Millisecond)
		for i, r := range reps {
			if !profile || r.debugURL == "" {
				continue
			}
			file := filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", i))
			profiles = append(profiles, file)
			profWG.Go(func() {
				if err := fetchProfile(ctx, r.debugURL, cfg.measure, file); err != nil {
					fmt.Fprintf(os.Stderr, "platformload: replica %s: %v\n", r.URL, err)
				}
			})
		}
	}
	if url != "" {
		// Statement counts: the extension's view, in the run's database.
		if err := createStatements(ctx, url); err != nil {
			return nil, err
		}
		cfg.midWarm = func() {
			if err := analyze(ctx, url); err != nil {
				fmt.Fprintf(os.Stderr, "platformload: %v\n", err)
			}
		}
	}
	res, err := runLoad(ctx, cfg)
	if res != nil {
		res.platformCPU, res.serverCPU = cpuTime(pids, false)-p0, serverCPU()-s0
		for _, pid := range pids {
			res.rss = append(res.rss, rssOf(pid))
		}
		if m1, st1 := machineCPU(); m1 > m0 && m0 > 0 {
			res.steal = float64(st1-st0) / float64(m1-m0)
		}
		ownCommits := int64(0)
		if waits != nil {
			var own int
			res.waits, own = waits.end()
			ownCommits = int64(own) + 1 // the sampler's, and the first count's
		}
		if kinds0 != nil {
			res.serverKinds = map[string]time.Duration{}
			for k, v := range serverProcesses(server) {
				res.serverKinds[k] = v - kinds0[k]
			}
			if c1, cerr := readCounters(ctx, url); cerr == nil {
				res.statements, res.commits, res.stmtsKnown = c1.statements-c0.statements, c1.commits-c0.commits-ownCommits, c1.stmtsKnown && c0.stmtsKnown
				res.walBytes, res.walFPI = c1.walBytes-c0.walBytes, c1.walFPI-c0.walFPI
				res.upd, res.hotUpd = c1.upd-c0.upd, c1.hotUpd-c0.hotUpd
				if c1.byStatement != nil {
					res.byStatement = map[string]stmtUse{}
					for q, u := range c1.byStatement {
						if d := u.calls - c0.byStatement[q].calls; d > 0 {
							res.byStatement[q] = stmtUse{d, u.time - c0.byStatement[q].time}
						}
					}
				}
			}
		}
		profWG.Wait()
		if perfWait != nil {
			if err := perfWait(); err != nil {
				fmt.Fprintf(os.Stderr, "platformload: perf: %v\n", err)
			} else if top, err := perfTop(perfFile); err == nil {
				res.perfTop = top
			}
		}
		if len(profiles) > 0 {
			if sh, _, perr := profileShares(bin, profiles); perr == nil {
				res.platformParts = sh
			} else {
				fmt.Fprintf(os.Stderr, "platformload: %v\n", perr)
			}
		}
	}
	for _, r := range reps {
		if serr := r.stop(); serr != nil && err == nil {
			err = fmt.Errorf("replica %s: %w", r.URL, serr)
		}
	}
	reps = nil
	return res, err
}
