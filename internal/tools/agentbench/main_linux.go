package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"

	"github.com/proofkit/nodekit/internal/testing/netnslab"
	"github.com/proofkit/nodekit/overload"
)

func main() {
	hold := flag.Int("hold", 0, "internal: hold this many loopback connections until stdin closes")
	connsFlag := flag.String("conns", "0,50000", "connection counts to measure, comma-separated")
	readings := flag.Int("readings", 100, "readings measured per connection count (after 3 of warm-up)")
	interval := flag.Duration("interval", 100*time.Millisecond, "agent -interval")
	agentBin := flag.String("agent", "", "agent binary (default: go build ./cmd/proofkit-agent)")
	flag.Parse()
	if *hold > 0 {
		os.Exit(netnslab.Hold(*hold, os.Stdin, os.Stdout, os.Stderr))
	}
	if err := run(*connsFlag, *readings, *interval, *agentBin); err != nil {
		fmt.Fprintf(os.Stderr, "agentbench: %v\n", err)
		os.Exit(1)
	}
}

func run(connsFlag string, readings int, interval time.Duration, agentBin string) error {
	if os.Geteuid() != 0 {
		return errors.New("run as root: it creates a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("needs ip (iproute2)")
	}
	var counts []int
	for s := range strings.SplitSeq(connsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 || n%netnslab.PerHolder != 0 {
			return fmt.Errorf("-conns %q: want multiples of %d", connsFlag, netnslab.PerHolder)
		}
		counts = append(counts, n)
	}
	tmp, err := os.MkdirTemp("", "nk-agentbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if agentBin == "" {
		agentBin = filepath.Join(tmp, "proofkit-agent")
		out, err := exec.Command("go", "build", "-o", agentBin, "./cmd/proofkit-agent").CombinedOutput()
		if err != nil {
			return fmt.Errorf("build the agent (run from the repository root): %v\n%s", err, out)
		}
	}

	ns := fmt.Sprintf("nk-agentbench-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add: %v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	conntrack := "untracked (nft not found)"
	if _, err := exec.LookPath("nft"); err == nil {
		rules := "add table inet nkbench\nadd chain inet nkbench out { type filter hook output priority 0; }\nadd rule inet nkbench out ct state new accept\n"
		cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft: %v: %s", err, out)
		}
		conntrack = "tracked by conntrack (nft rule in the namespace)"
	}

	plat, err := newPlatform()
	if err != nil {
		return err
	}
	defer plat.srv.Close()

	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("agentbench: %s, interval %v, %d readings measured per row, connections %s\n\n",
		agentBin, interval, readings, conntrack)
	fmt.Printf("%-12s %10s %10s %14s %10s %18s\n", "connections", "VmHWM", "VmRSS", "CPU/reading", "readings", "conntrack entries")
	var holders []*netnslab.Holder
	defer func() {
		for _, h := range holders {
			h.Stop()
		}
	}()
	held := 0
	for _, n := range counts {
		var starting []*netnslab.Holder
		for ; held < n; held += netnslab.PerHolder {
			h, err := netnslab.Start(exec.Command("ip", "netns", "exec", ns, self, "-hold", strconv.Itoa(netnslab.PerHolder)))
			if err != nil {
				return err
			}
			starting = append(starting, h)
			holders = append(holders, h)
		}
		for _, h := range starting {
			if err := h.WaitReady(); err != nil {
				return err
			}
		}
		res, err := measure(agentBin, ns, tmp, plat, interval, readings)
		if err != nil {
			return fmt.Errorf("%d connections: %w", n, err)
		}
		var last overload.Reading
		if b := plat.last.Load(); b != nil {
			_ = json.Unmarshal(*b, &last)
		}
		fmt.Printf("%-12d %6.1f MiB %6.1f MiB %11.2f ms %10d %18d\n", n,
			float64(res.hwm)/(1<<20), float64(res.rss)/(1<<20), res.cpuPerReading.Seconds()*1e3, res.readings, last.ConntrackEntries)
	}
	return nil
}

type result struct {
	hwm, rss      uint64 // bytes
	cpuPerReading time.Duration
	readings      int64
}

// measure runs one agent against the namespace: 3 readings of warm-up,
// then CPU time over the next readings, then the memory high-water mark.
func measure(agentBin, ns, tmp string, plat *platform, interval time.Duration, readings int) (result, error) {
	state, err := os.MkdirTemp(tmp, "state-")
	if err != nil {
		return result{}, err
	}
	token := filepath.Join(tmp, "token")
	if err := os.WriteFile(token, []byte("bench\n"), 0o600); err != nil {
		return result{}, err
	}
	cmd := exec.Command(agentBin, "-netns", "/var/run/netns/"+ns, "-sysctl", "off", "-listen", "off",
		"-interval", interval.String(), "-state-dir", state, "-node", "bench",
		"-report-url", "http://"+plat.addr+"/readings", "-token-file", token, "-log-level", "warn")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	agent, err := procfs.NewProc(cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	start := plat.count.Load()
	wait := func(n int64) error {
		deadline := time.Now().Add(time.Duration(n)*interval*4 + 30*time.Second)
		for plat.count.Load()-start < n {
			if time.Now().After(deadline) {
				return fmt.Errorf("agent sent %d of %d readings: %s", plat.count.Load()-start, n, stderr.Bytes())
			}
			time.Sleep(interval / 4)
		}
		return nil
	}
	if err := wait(3); err != nil {
		return result{}, err
	}
	r0, cpu0, err := sample(agent, plat)
	if err != nil {
		return result{}, err
	}
	if err := wait(3 + int64(readings)); err != nil {
		return result{}, err
	}
	r1, cpu1, err := sample(agent, plat)
	if err != nil {
		return result{}, err
	}
	res := result{readings: r1 - r0}
	res.cpuPerReading = (cpu1 - cpu0) / time.Duration(res.readings)
	status, err := agent.NewStatus()
	if err != nil {
		err = fmt.Errorf("agent's memory: %w", err)
	}
	res.hwm, res.rss = status.VmHWM, status.VmRSS
	if strings.Contains(stderr.String(), "level=ERROR") {
		return res, fmt.Errorf("agent logged errors: %s", stderr.Bytes())
	}
	return res, err
}

// sample returns the readings received so far and the agent's CPU time
// (utime + stime).
func sample(agent procfs.Proc, plat *platform) (int64, time.Duration, error) {
	n := plat.count.Load()
	st, err := agent.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("agent's CPU time: %w", err)
	}
	const clkTck = 100 // USER_HZ on Linux
	return n, time.Duration(st.UTime+st.STime) * time.Second / clkTck, nil
}

// platform counts the readings the agent reports.
type platform struct {
	addr  string
	srv   *http.Server
	count atomic.Int64
	last  atomic.Pointer[[]byte] // the latest report's body
}

func newPlatform() (*platform, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &platform{addr: ln.Addr().String()}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p.last.Store(&b)
		p.count.Add(1)
		w.WriteHeader(http.StatusAccepted)
	})}
	go p.srv.Serve(ln)
	return p, nil
}
