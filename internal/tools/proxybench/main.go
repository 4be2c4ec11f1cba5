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
// re-executed with -role.
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
	"strings"
	"time"
)

type options struct {
	rounds     int
	duration   time.Duration
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
}

func main() {
	role := flag.String("role", "", "internal: run as a child process (sink, naive, floor, pinproxy)")
	upstreams := flag.String("upstreams", "", "internal: comma-separated upstreams of a proxy child")
	var o options
	flag.IntVar(&o.rounds, "rounds", 5, "rounds; each measures every target once per metric, in rotated order")
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "length of each throughput and connection-rate measurement")
	flag.IntVar(&o.streams, "streams", 4, "parallel streams of the throughput measurement")
	flag.IntVar(&o.clients, "clients", 32, "concurrent clients of the connection-rate measurement")
	flag.DurationVar(&o.parked, "parked", time.Minute, "how long pinproxy's idle connections are left idle (after they opened) before their memory is read again: they park after 30 s idle by default (0: skip)")
	flag.IntVar(&o.idle, "idle", 9000, "idle connections held open through each proxy for the memory measurement (capped per proxy by the fds it needs: HAProxy at -maxconn, the naive proxy at 3000)")
	targets := flag.String("targets", "direct,haproxy,haproxy-nolog,haproxy-force,naive,floor,pinproxy,pinproxy-nolog", "what to measure, comma-separated: haproxy is the reference configuration (mode tcp, balance leastconn, nbthread 2, option splice-auto) with a log line per connection (option tcplog, to a Unix datagram socket this harness reads), the reference of the ratios beside pinproxy with its defaults (a log line per connection on stderr, read here); haproxy-nolog and pinproxy-nolog log nothing (pinproxy -log-connections=false) and are compared with each other; haproxy-force adds option splice-request and splice-response (splice every transfer); floor is the least a Go proxy can do per connection (an epoll loop per CPU, raw syscalls, no goroutine per connection; floor_linux.go); exp:PATH runs the pinproxy of another build of this harness at PATH, for A/B comparisons")
	metrics := flag.String("metrics", "throughput,connrate,idle", "which measurements to run, comma-separated")
	flag.StringVar(&o.haproxyBin, "haproxy", "haproxy", "HAProxy binary")
	flag.IntVar(&o.maxconn, "maxconn", 7000, "HAProxy maxconn (it needs 2 fds per connection and pipes beside them; the fd limit here is 20,000)")
	flag.IntVar(&o.pipesize, "pipesize", 0, "HAProxy tune.pipesize in bytes (0: the system's default pipe size, as the reference configuration has it)")
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
				h, err := startHAProxy(bin, ups, o.maxconn, o.pipesize, force, logs)
				if err != nil {
					return nil, err
				}
				return &running{addrs: []string{h.addr}, pid: h.pid(), stop: h.stop}, nil
			}})
		case "naive":
			// 2 splice pipes held per idle connection: 6 fds each.
			out = append(out, &target{name: name, label: "naive Go proxy, 2 goroutines/conn", idleMax: 3000, start: startGoProxy("", name)})
		case "floor":
			out = append(out, &target{name: name, label: "epoll floor (see floor_linux.go)", idleMax: o.idle, start: startGoProxy("", name)})
		case "pinproxy":
			out = append(out, &target{name: name, label: "pinproxy", idleMax: o.idle, parks: true, start: startGoProxy("", name)})
		case "pinproxy-nolog":
			out = append(out, &target{name: name, label: "pinproxy, no log", idleMax: o.idle, parks: true, start: startGoProxy("", name)})
		default:
			exe, ok := strings.CutPrefix(name, "exp:")
			if !ok {
				return nil, fmt.Errorf("unknown target %q (want direct, haproxy, haproxy-nolog, haproxy-force, naive, floor, pinproxy, pinproxy-nolog, exp:PATH)", name)
			}
			out = append(out, &target{name: name, label: name, idleMax: o.idle, parks: true, start: startGoProxy(exe, "pinproxy")})
		}
	}
	return out, nil
}

// startGoProxy is the start function of a Go proxy target: exe (empty:
// this binary) run as a child with -role role.
func startGoProxy(exe, role string) func(upstreams []string) (*running, error) {
	return func(ups []string) (*running, error) {
		c, err := startChild(exe, role, ups)
		if err != nil {
			return nil, err
		}
		return &running{addrs: c.ready, pid: c.pid(), ctl: c, stop: c.stop}, nil
	}
}

// metric names, in printing order.
const (
	mThroughput = "throughput"
	mConnRate   = "connrate"
	mConnFailed = "connfailed"
	mConnCPU    = "conncpu"
	mBulkCPU    = "bulkcpu"
	mIdleN      = "idle-n"
	mIdleRSS    = "idle-rss"
	mIdleGo     = "idle-go"
	mIdleStack  = "idle-stack"
	mIdleFDs    = "idle-fds"
	mIdleGs     = "idle-goroutines"
	mIdleGCRSS  = "idle-gc-rss"
	mParkedRSS  = "parked-rss"
	mParkedGo   = "parked-go"
	mParkedStk  = "parked-stack"
	mParkedGs   = "parked-goroutines"
	mParkedPoll = "parked-other-sys"
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
	sk, err := startChild("", "sink", nil)
	if err != nil {
		return err
	}
	defer sk.stop()
	if len(sk.ready) != 4 {
		return fmt.Errorf("sink: want 4 addresses, got %q", sk.ready)
	}
	bulk, echo := sk.ready[:2], sk.ready[2:]

	fmt.Printf("proxybench: %d rounds on loopback, %d CPUs, %s; targets %s\n",
		o.rounds, runtime.NumCPU(), runtime.Version(), strings.Join(o.targets, ", "))
	res := results{}
	began := time.Now()
	for round := range o.rounds {
		order := append(slices.Clone(targets[round%len(targets):]), targets[:round%len(targets)]...)
		for _, m := range []struct {
			name    string // as -metrics names it
			measure func(*target) error
		}{
			{"throughput", func(t *target) error { return measureThroughput(o, res, t, bulk, round) }},
			{"connrate", func(t *target) error { return measureConnRate(o, res, t, echo, round) }},
			{"idle", func(t *target) error { return measureIdle(o, res, t, echo) }},
		} {
			if !o.metrics[m.name] {
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
// target without a process of its own).
func timed(o options, t *target, upstreams []string, round int, phase string, f func(*running) error) (used, elapsed time.Duration, err error) {
	r, err := t.start(upstreams)
	if err != nil {
		return 0, 0, err
	}
	defer r.stop()
	stop := profile(o, r, t.name, round, phase)
	cpu := startCPU(r)
	err = f(r)
	used, elapsed = cpu()
	stop()
	return used, elapsed, err
}

func measureThroughput(o options, res results, t *target, bulk []string, round int) error {
	var bps float64
	used, elapsed, err := timed(o, t, bulk, round, "throughput", func(r *running) (err error) {
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
	var (
		rate   float64
		failed int64
	)
	used, elapsed, err := timed(o, t, echo, round, "connrate", func(r *running) (err error) {
		rate, failed, err = connRate(r.addrs, o.clients, o.duration)
		return err
	})
	if err != nil {
		return err
	}
	res.add(mConnRate, t.name, rate)
	if used > 0 {
		res.add(mConnCPU, t.name, float64(used.Microseconds())/(rate*elapsed.Seconds()))
	}
	res.add(mConnFailed, t.name, float64(failed))
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
