// Command proxybench measures pinproxy against HAProxy and a direct
// connection on loopback, in one run: bulk throughput, connections per
// second, and memory per idle proxied connection. It prints the medians of
// several interleaved rounds and the ratios pinproxy/HAProxy against the
// targets set for pinproxy.
//
//	go run ./internal/tools/proxybench -rounds 5
//
// Every proxy runs as its own process, in front of a sink process (the
// upstream); the clients run in this process. Go proxies are this binary
// re-executed with -role. The connection rate runs every target at once and
// alternates them a slice at a time (-slice), and prints beside each rate
// the CPU the whole pipeline spent a connection and the share of the
// machine it got: on a shared machine the rate is both.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

type options struct {
	rounds     int
	duration   time.Duration
	slice      time.Duration
	streams    int
	clients    int
	idle       int
	parked     time.Duration
	targets    []string
	haproxyBin string
	maxconn    int
	pipesize   int
	cpuprofile string
	metrics    map[string]bool
	sinkPID    int // the sink's process, whose CPU is counted beside the proxy's
	// CPUs the proxies run on, and the clients and the sink (-pin); nil:
	// not pinned.
	proxyCPUs, loadCPUs []int
}

func main() {
	role := flag.String("role", "", "internal: run as a child process (sink, naive, floor, pinproxy)")
	upstreams := flag.String("upstreams", "", "internal: comma-separated upstreams of a proxy child")
	var o options
	flag.IntVar(&o.rounds, "rounds", 5, "rounds; each measures every target once per metric, in rotated order")
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "length of each throughput and connection-rate measurement")
	flag.DurationVar(&o.slice, "slice", 200*time.Millisecond, "the connection rate's slice: every target runs at once, idle but for its turn, and each measures -duration in slices of this length, the targets' slices alternating, so the machine's other jobs weigh on each alike (0: each target alone for the whole -duration, started and stopped around it)")
	flag.IntVar(&o.streams, "streams", 4, "parallel streams of the throughput measurement")
	flag.IntVar(&o.clients, "clients", 32, "concurrent clients of the connection-rate measurement")
	flag.DurationVar(&o.parked, "parked", time.Minute, "how long pinproxy's idle connections are left idle (after they opened) before their memory is read again: they park after 30 s idle by default (0: skip)")
	flag.IntVar(&o.idle, "idle", 9000, "idle connections held open through each proxy for the memory measurement (capped per proxy by the fds it needs: HAProxy at -maxconn, the naive proxy at 3000)")
	targets := flag.String("targets", "direct,haproxy,haproxy-nolog,haproxy-force,naive,floor,pinproxy,pinproxy-nolog", "what to measure, comma-separated: haproxy is the reference configuration (mode tcp, balance leastconn, a thread per CPU (nbthread; 2 here), option splice-auto) with a log line per connection (option tcplog, to a Unix datagram socket this harness reads), the reference of the ratios beside pinproxy with its defaults (a log line per connection on stderr, read here); haproxy-nolog and pinproxy-nolog log nothing (pinproxy -log-connections=false) and are compared with each other; haproxy-force adds option splice-request and splice-response (splice every transfer); floor is the least a Go proxy can do per connection (an epoll loop per CPU, raw syscalls, no goroutine per connection; floor_linux.go); exp:PATH runs the pinproxy of another build of this harness at PATH, for A/B comparisons")
	metrics := flag.String("metrics", "throughput,connrate,idle", "which measurements to run, comma-separated")
	flag.StringVar(&o.haproxyBin, "haproxy", "haproxy", "HAProxy binary")
	flag.IntVar(&o.maxconn, "maxconn", 7000, "HAProxy maxconn (it needs 2 fds per connection and pipes beside them; the fd limit here is 20,000)")
	flag.IntVar(&o.pipesize, "pipesize", 0, "HAProxy tune.pipesize in bytes (0: the system's default pipe size, as the reference configuration has it)")
	pin := flag.String("pin", "", "PROXY/LOAD: pin every proxy to the CPUs PROXY and the clients and the sink to the CPUs LOAD (lists as taskset -c takes them: 1/0, 2-3/0-1); a Go proxy then runs a loop per CPU of PROXY (GOMAXPROCS follows the affinity) and HAProxy as many threads (nbthread); empty: nothing pinned, HAProxy with a thread per CPU")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "directory: write CPU profiles of the Go proxies' throughput and connection-rate phases")
	flag.Parse()

	if *role != "" {
		var ups []string
		if *upstreams != "" {
			ups = strings.Split(*upstreams, ",")
		}
		if err := runRole(*role, ups); err != nil {
			fmt.Fprintln(os.Stderr, "proxybench:", err)
			os.Exit(1)
		}
		return
	}
	if *pin != "" {
		var err error
		if o.proxyCPUs, o.loadCPUs, err = parsePin(*pin); err != nil {
			fmt.Fprintln(os.Stderr, "proxybench: -pin:", err)
			os.Exit(2)
		}
	}
	o.targets = strings.Split(*targets, ",")
	o.metrics = map[string]bool{}
	for _, m := range strings.Split(*metrics, ",") {
		o.metrics[m] = true
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "proxybench:", err)
		os.Exit(1)
	}
}

// target is one thing clients connect through.
type target struct {
	name, label string
	// idleMax is the most idle connections it can hold under the fd limit
	// here; 0: memory is not measured (direct).
	idleMax int
	parks   bool // a pinproxy: its idle connections park
	start   func(upstreams []string) (*running, error)
}

// running is a started target: the addresses clients dial, and the process
// whose memory counts.
type running struct {
	addrs []string
	pid   int    // 0: no process of its own
	ctl   *child // a Go proxy's control channel; nil otherwise
	stop  func()
}

func buildTargets(o options) ([]*target, error) {
	var out []*target
	for _, name := range o.targets {
		switch name {
		case "direct":
			out = append(out, &target{name: name, label: "direct", start: func(ups []string) (*running, error) {
				return &running{addrs: ups, stop: func() {}}, nil
			}})
		case "haproxy", "haproxy-nolog", "haproxy-force":
			bin, err := exec.LookPath(o.haproxyBin)
			if err != nil {
				fmt.Printf("%s skipped: %v (Debian: apt-get install haproxy)\n", name, err)
				continue
			}
			force, logs := name == "haproxy-force", name != "haproxy-nolog"
			label := map[string]string{"haproxy": "HAProxy", "haproxy-nolog": "HAProxy, no log", "haproxy-force": "HAProxy, splice forced"}[name]
			out = append(out, &target{name: name, label: label, idleMax: o.maxconn, start: func(ups []string) (*running, error) {
				h, err := startHAProxy(bin, ups, o.maxconn, o.pipesize, force, logs, o.proxyCPUs)
				if err != nil {
					return nil, err
				}
				return &running{addrs: []string{h.addr}, pid: h.pid(), stop: h.stop}, nil
			}})
		case "naive":
			// 2 splice pipes held per idle connection: 6 fds each.
			out = append(out, &target{name: name, label: "naive Go proxy, 2 goroutines/conn", idleMax: 3000, start: startGoProxy(o, "", name)})
		case "floor":
			out = append(out, &target{name: name, label: "epoll floor (see floor_linux.go)", idleMax: o.idle, start: startGoProxy(o, "", name)})
		case "pinproxy":
			out = append(out, &target{name: name, label: "pinproxy", idleMax: o.idle, parks: true, start: startGoProxy(o, "", name)})
		case "pinproxy-nolog":
			out = append(out, &target{name: name, label: "pinproxy, no log", idleMax: o.idle, parks: true, start: startGoProxy(o, "", name)})
		default:
			exe, ok := strings.CutPrefix(name, "exp:")
			if !ok {
				return nil, fmt.Errorf("unknown target %q (want direct, haproxy, haproxy-nolog, haproxy-force, naive, floor, pinproxy, pinproxy-nolog, exp:PATH)", name)
			}
			out = append(out, &target{name: name, label: name, idleMax: o.idle, parks: true, start: startGoProxy(o, exe, "pinproxy")})
		}
	}
	return out, nil
}

// startGoProxy is the start function of a Go proxy target: exe (empty:
// this binary) run as a child with -role role, on o's proxy CPUs.
func startGoProxy(o options, exe, role string) func(upstreams []string) (*running, error) {
	return func(ups []string) (*running, error) {
		c, err := startChild(exe, role, ups, o.proxyCPUs)
		if err != nil {
			return nil, err
		}
		return &running{addrs: c.ready, pid: c.pid(), ctl: c, stop: c.stop}, nil
	}
}

// parsePin parses -pin's PROXY/LOAD.
func parsePin(s string) (proxy, load []int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if !ok {
		return nil, nil, fmt.Errorf("%q: want PROXY/LOAD, two CPU lists", s)
	}
	if proxy, err = parseCPUList(a); err != nil {
		return nil, nil, err
	}
	if load, err = parseCPUList(b); err != nil {
		return nil, nil, err
	}
	return proxy, load, nil
}

// parseCPUList parses a CPU list as taskset -c takes it: 0,2-3.
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, f := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(f, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b >= runtime.NumCPU() {
			return nil, fmt.Errorf("CPU list %q: %q is not a CPU or a range of this machine's %d", s, f, runtime.NumCPU())
		}
		for c := a; c <= b; c++ {
			if !slices.Contains(cpus, c) {
				cpus = append(cpus, c)
			}
		}
	}
	return cpus, nil
}

// metric names, in printing order.
const (
	mThroughput = "throughput"
	mConnRate   = "connrate"
	mConnFailed = "connfailed"
	mConnCPU    = "conncpu"
	// The rest of the connection-rate pipeline: the clients' and the
	// sink's CPU per connection, and the machine's busy share.
	mConnClientCPU = "conncpu-clients"
	mConnSinkCPU   = "conncpu-sink"
	mConnBusy      = "conn-busy"
	mConnShare     = "conn-share"
	mConnPipeCPU   = "conncpu-pipeline"
	mBulkCPU       = "bulkcpu"
	mIdleN         = "idle-n"
	mIdleRSS       = "idle-rss"
	mIdleGo        = "idle-go"
	mIdleStack     = "idle-stack"
	mIdleFDs       = "idle-fds"
	mIdleGs        = "idle-goroutines"
	mIdleGCRSS     = "idle-gc-rss"
	mParkedRSS     = "parked-rss"
	mParkedGo      = "parked-go"
	mParkedStk     = "parked-stack"
	mParkedGs      = "parked-goroutines"
	mParkedPoll    = "parked-other-sys"
)

type results map[string]map[string][]float64 // metric → target → one value per round

func (r results) add(metric, target string, v float64) {
	if r[metric] == nil {
		r[metric] = map[string][]float64{}
	}
	r[metric][target] = append(r[metric][target], v)
}

func run(o options) error {
	targets, err := buildTargets(o)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		return errors.New("nothing to measure")
	}
	if o.cpuprofile != "" {
		if err := os.MkdirAll(o.cpuprofile, 0o755); err != nil {
			return err
		}
	}
	if o.loadCPUs != nil {
		// The clients are this process: every thread of it, and those it
		// makes later (a thread inherits its maker's affinity).
		if err := pinSelf(o.loadCPUs); err != nil {
			return fmt.Errorf("pin the clients: %w", err)
		}
		runtime.GOMAXPROCS(len(o.loadCPUs))
	}
	sk, err := startChild("", "sink", nil, o.loadCPUs)
	if err != nil {
		return err
	}
	defer sk.stop()
	if len(sk.ready) != 4 {
		return fmt.Errorf("sink: want 4 addresses, got %q", sk.ready)
	}
	bulk, echo := sk.ready[:2], sk.ready[2:]
	o.sinkPID = sk.pid()

	fmt.Printf("proxybench: %d rounds on loopback, %d CPUs, %s; targets %s\n",
		o.rounds, runtime.NumCPU(), runtime.Version(), strings.Join(o.targets, ", "))
	if o.proxyCPUs != nil {
		fmt.Printf("pinned: the proxies on CPUs %v, the clients and the sink on CPUs %v\n", o.proxyCPUs, o.loadCPUs)
	}
	res := results{}
	began := time.Now()
	for round := range o.rounds {
		order := append(slices.Clone(targets[round%len(targets):]), targets[:round%len(targets)]...)
		// The connection rate in slices measures every target at once.
		var connAll func() error
		if o.slice > 0 && o.slice < o.duration {
			connAll = func() error { return measureConnRateSliced(o, res, order, echo, round) }
		}
		for _, m := range []struct {
			name    string // as -metrics names it
			measure func(*target) error
			all     func() error // measures every target at once (instead of measure); nil: none
		}{
			{name: "throughput", measure: func(t *target) error { return measureThroughput(o, res, t, bulk, round) }},
			{name: "connrate", measure: func(t *target) error { return measureConnRate(o, res, t, echo, round) }, all: connAll},
			{name: "idle", measure: func(t *target) error { return measureIdle(o, res, t, echo) }},
		} {
			if !o.metrics[m.name] {
				continue
			}
			if m.all != nil {
				if err := m.all(); err != nil {
					return fmt.Errorf("round %d: %w", round+1, err)
				}
				continue
			}
			for _, t := range order {
				if err := m.measure(t); err != nil {
					return fmt.Errorf("round %d, %s: %w", round+1, t.name, err)
				}
			}
		}
		fmt.Printf("round %d done (%s)\n", round+1, time.Since(began).Round(time.Second))
	}
	report(os.Stdout, o, targets, res)
	summary(os.Stdout, targets, res)
	return nil
}

func profile(o options, r *running, name string, round int, phase string) func() {
	if o.cpuprofile == "" || r.ctl == nil {
		return func() {}
	}
	// An exp:PATH target's name holds a path: the file takes its base.
	if exe, ok := strings.CutPrefix(name, "exp:"); ok {
		name = "exp-" + filepath.Base(exe)
	}
	path := filepath.Join(o.cpuprofile, fmt.Sprintf("%s-%s-r%d.pprof", name, phase, round+1))
	if _, err := r.ctl.call("cpuprofile " + path); err != nil {
		fmt.Fprintln(os.Stderr, "proxybench: profile:", err)
		return func() {}
	}
	return func() { r.ctl.call("stopprofile") }
}

// timed starts t in front of upstreams and runs f against it, profiling
// t's process for phase (-cpuprofile) meanwhile. It returns the CPU time
// that process used during f and the wall time that passed (0, 0 for a
// target without a process of its own), and the rest of the pipeline's
// CPU over the same time.
func timed(o options, t *target, upstreams []string, round int, phase string, f func(*running) error) (used, elapsed time.Duration, rest pipelineCPU, err error) {
	r, err := t.start(upstreams)
	if err != nil {
		return 0, 0, rest, err
	}
	defer r.stop()
	stop := profile(o, r, t.name, round, phase)
	cpu := startCPU(r)
	others := startPipelineCPU(o.sinkPID)
	err = f(r)
	rest = others()
	used, elapsed = cpu()
	stop()
	return used, elapsed, rest, err
}

// pipelineCPU is what the rest of a measurement's pipeline used while it
// ran: the clients (this process), the sink, and the machine as a whole.
type pipelineCPU struct {
	clients, sink time.Duration
	// The machine's CPU time, summed over its CPUs, in seconds: busy
	// (every process, this run's and others') and all.
	busy, all float64
}

// busyShare is the share of the machine's CPU time that was busy, 0 to 1.
func (p pipelineCPU) busyShare() float64 {
	if p.all <= 0 {
		return 0
	}
	return p.busy / p.all
}

// startPipelineCPU starts counting the CPU of this process (the clients),
// the sink's (sinkPID) and the machine's; the function it returns gives
// what each used since (zeros where /proc cannot be read).
func startPipelineCPU(sinkPID int) func() pipelineCPU {
	self0, _ := cpuTime(os.Getpid())
	sink0, _ := cpuTime(sinkPID)
	busy0, all0, err0 := machineCPU()
	return func() pipelineCPU {
		self1, _ := cpuTime(os.Getpid())
		sink1, _ := cpuTime(sinkPID)
		busy1, all1, err1 := machineCPU()
		p := pipelineCPU{clients: self1 - self0, sink: sink1 - sink0}
		if err0 == nil && err1 == nil {
			p.busy, p.all = busy1-busy0, all1-all0
		}
		return p
	}
}

func measureThroughput(o options, res results, t *target, bulk []string, round int) error {
	var bps float64
	used, elapsed, _, err := timed(o, t, bulk, round, "throughput", func(r *running) (err error) {
		bps, err = throughput(r.addrs[0], o.streams, o.duration)
		return err
	})
	if err != nil {
		return err
	}
	res.add(mThroughput, t.name, bps/(1<<20))
	if used > 0 {
		res.add(mBulkCPU, t.name, used.Seconds()*1000/(bps*elapsed.Seconds()/(1<<30)))
	}
	return nil
}

func measureConnRate(o options, res results, t *target, echo []string, round int) error {
	var c connCount
	used, elapsed, rest, err := timed(o, t, echo, round, "connrate", func(r *running) (err error) {
		c, err = connRate(r.addrs, o.clients, o.duration)
		return err
	})
	if err != nil {
		return err
	}
	c.add(connCPU{used, elapsed, rest})
	c.record(res, t.name)
	return nil
}

// connCount is a target's connection-rate measurement: the connections
// made (ok), those that failed, over how long, and the CPU spent
// meanwhile.
type connCount struct {
	ok, failed int64
	elapsed    time.Duration // the clients' time
	cpu        connCPU
}

// connCPU is the CPU a connection-rate measurement cost: the proxy's
// (used, over elapsed; 0, 0 for a target without a process of its own)
// and the rest of the pipeline's.
type connCPU struct {
	used, elapsed time.Duration
	rest          pipelineCPU
}

// add counts c's CPU and x's (another slice of the same target's).
func (c *connCount) add(x connCPU) {
	c.cpu.rest.busy += x.rest.busy
	c.cpu.rest.all += x.rest.all
	c.cpu.used += x.used
	c.cpu.elapsed += x.elapsed
	c.cpu.rest.clients += x.rest.clients
	c.cpu.rest.sink += x.rest.sink
}

// record adds c's figures for target to res.
func (c *connCount) record(res results, target string) {
	res.add(mConnRate, target, float64(c.ok)/c.elapsed.Seconds())
	res.add(mConnFailed, target, float64(c.failed))
	if c.ok == 0 {
		return
	}
	// The CPU was counted over the same time as the connections.
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(c.ok) }
	if c.cpu.used > 0 {
		res.add(mConnCPU, target, per(c.cpu.used))
	}
	res.add(mConnClientCPU, target, per(c.cpu.rest.clients))
	res.add(mConnSinkCPU, target, per(c.cpu.rest.sink))
	res.add(mConnBusy, target, 100*c.cpu.rest.busyShare())
	// How much of the machine the pipeline got: with the CPU a
	// connection, it makes the rate (rate = share × CPUs / CPU a
	// connection).
	all := c.cpu.used + c.cpu.rest.clients + c.cpu.rest.sink
	res.add(mConnPipeCPU, target, per(all))
	res.add(mConnShare, target, 100*all.Seconds()/(c.elapsed.Seconds()*float64(runtime.NumCPU())))
}

// measureConnRateSliced measures the connection rate of every target of
// order in one round, all of them running meanwhile: o.duration each, in
// slices of o.slice, the targets taking turns (in an order rotated at each
// slice). On this shared machine other jobs come and go within a
// target's two seconds; alternating a fifth of a second at a time, every
// target meets the same load, and the ratios hold still where the rates
// swing.
func measureConnRateSliced(o options, res results, order []*target, echo []string, round int) error {
	type live struct {
		t    *target
		r    *running
		stop func() // the profile's
		c    connCount
	}
	var ls []*live
	defer func() {
		for _, l := range ls {
			l.stop()
			l.r.stop()
		}
	}()
	for _, t := range order {
		r, err := t.start(echo)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		ls = append(ls, &live{t: t, r: r, stop: func() {}})
	}
	// Each target warms up once, unmeasured: a process's first
	// connections grow its heap and its threads.
	for _, l := range ls {
		if _, err := connRate(l.r.addrs, o.clients, o.slice); err != nil {
			return fmt.Errorf("%s: warm-up: %w", l.t.name, err)
		}
	}
	for _, l := range ls {
		l.stop = profile(o, l.r, l.t.name, round, "connrate")
	}
	n := int((o.duration + o.slice - 1) / o.slice)
	for s := range n {
		for i := range ls {
			l := ls[(s+i)%len(ls)]
			cpu := startCPU(l.r)
			others := startPipelineCPU(o.sinkPID)
			c, err := connRate(l.r.addrs, o.clients, o.slice)
			rest := others()
			used, elapsed := cpu()
			if err != nil {
				return fmt.Errorf("%s: %w", l.t.name, err)
			}
			l.c.ok += c.ok
			l.c.failed += c.failed
			l.c.elapsed += c.elapsed
			l.c.add(connCPU{used, elapsed, rest})
		}
	}
	for _, l := range ls {
		l.c.record(res, l.t.name)
	}
	return nil
}

// startCPU starts counting the CPU time of r's process; the function it
// returns gives the CPU time used since, and the wall time that passed
// (0, 0 for a target without a process of its own).
func startCPU(r *running) func() (used, elapsed time.Duration) {
	if r.pid == 0 {
		return func() (time.Duration, time.Duration) { return 0, 0 }
	}
	before, err := cpuTime(r.pid)
	start := time.Now()
	return func() (time.Duration, time.Duration) {
		after, err2 := cpuTime(r.pid)
		if err != nil || err2 != nil {
			return 0, 0
		}
		return after - before, time.Since(start)
	}
}

// measureIdle starts the target fresh, warms it with a few connections,
// then holds n idle connections open through it and takes the growth of
// its resident memory (VmRSS), open fds and, for a Go proxy, its own
// heap+stack figures, per connection. A target without a process of its
// own (direct) is skipped.
func measureIdle(o options, res results, t *target, echo []string) error {
	if t.idleMax == 0 {
		return nil
	}
	n := min(o.idle, t.idleMax)
	r, err := t.start(echo)
	if err != nil {
		return err
	}
	defer r.stop()
	warm, err := openIdle(r.addrs[0], 64, 16)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	closeAll(warm)
	time.Sleep(300 * time.Millisecond)
	before, err := snapshot(r)
	if err != nil {
		return err
	}
	conns, err := openIdle(r.addrs[0], n, 64)
	if err != nil {
		return fmt.Errorf("%d idle connections: %w", n, err)
	}
	opened := time.Now()
	defer closeAll(conns)
	// Each connection went idle after its echo, as it opened: read the
	// memory one and a half seconds after the last one did.
	time.Sleep(1500 * time.Millisecond)
	after, err := snapshot(r)
	if err != nil {
		return err
	}
	per := func(a, b float64) float64 { return (a - b) / float64(n) }
	res.add(mIdleN, t.name, float64(n))
	res.add(mIdleRSS, t.name, per(float64(after.rss), float64(before.rss))/1024)
	res.add(mIdleFDs, t.name, per(float64(after.fds), float64(before.fds)))
	if r.ctl != nil {
		res.add(mIdleGo, t.name, per(float64(after.rt.HeapInuse+after.rt.StackInuse), float64(before.rt.HeapInuse+before.rt.StackInuse))/1024)
		res.add(mIdleStack, t.name, per(float64(after.rt.StackInuse), float64(before.rt.StackInuse))/1024)
		res.add(mIdleGs, t.name, per(float64(after.rt.Goroutines), float64(before.rt.Goroutines)))
		if t.parks && o.parked > 0 {
			// Idle long enough to park, and for the memory the
			// goroutines gave up to go back to the kernel, with no
			// help from here.
			time.Sleep(time.Until(opened.Add(o.parked)))
			parked, err := snapshot(r)
			if err != nil {
				return err
			}
			res.add(mParkedRSS, t.name, per(float64(parked.rss), float64(before.rss))/1024)
			res.add(mParkedGo, t.name, per(float64(parked.rt.HeapInuse+parked.rt.StackInuse), float64(before.rt.HeapInuse+before.rt.StackInuse))/1024)
			res.add(mParkedStk, t.name, per(float64(parked.rt.StackInuse), float64(before.rt.StackInuse))/1024)
			res.add(mParkedGs, t.name, per(float64(parked.rt.Goroutines), float64(before.rt.Goroutines)))
			res.add(mParkedPoll, t.name, per(float64(parked.rt.OtherSys), float64(before.rt.OtherSys))/1024)
		}
		if _, err := r.ctl.call("gc"); err != nil {
			return err
		}
		settled, err := snapshot(r)
		if err != nil {
			return err
		}
		res.add(mIdleGCRSS, t.name, per(float64(settled.rss), float64(before.rss))/1024)
	}
	return nil
}

type snap struct {
	rss int64
	fds int
	rt  runtimeStats
}

func snapshot(r *running) (snap, error) {
	var s snap
	var err error
	if s.rss, err = vmRSS(r.pid); err != nil {
		return s, err
	}
	if s.fds, err = openFDs(r.pid); err != nil {
		return s, err
	}
	if r.ctl != nil {
		if s.rt, err = r.ctl.stats(); err != nil {
			return s, err
		}
	}
	return s, nil
}
