package probe

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/internal/testing/netnslab"
	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// BenchmarkRead measures one Read of a namespace holding 0, 10,000 and
// 50,000 established TCP connections (each a loopback connection with both
// ends in the namespace, so twice as many established sockets), against
// `ss -tan` in the same namespace, then 0 again once the connections are
// gone (reset, so no TIME_WAIT is left): the two runs at 0 bound how much
// the shared box drifted meanwhile. Run it as root:
//
//	go test -run '^$' -bench BenchmarkRead -count 3 ./overload/probe/
func BenchmarkRead(b *testing.B) {
	testkit.NeedRoot(b, "ip", "ss")
	name, nsPath := newNetNS(b)
	p := newProbe(b, Config{NetNS: nsPath})
	read(b, p)

	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	var helpers []*netnslab.Holder
	perRead := map[string]float64{}
	perSS := map[string]float64{}
	stages := []struct {
		name  string
		conns int
	}{{"conns=0", 0}, {"conns=10000", 10000}, {"conns=50000", 50000}, {"conns=0-after", 0}}
	for _, st := range stages {
		var starting []*netnslab.Holder
		for held := len(helpers) * netnslab.PerHolder; held < st.conns; held += netnslab.PerHolder {
			starting = append(starting, startHelper(b, exe, name, netnslab.PerHolder))
		}
		for _, h := range starting {
			if err := h.WaitReady(); err != nil {
				b.Fatal(err)
			}
		}
		helpers = append(helpers, starting...)
		if st.conns == 0 {
			for _, h := range helpers {
				stopHelper(b, h)
			}
			helpers = nil
		}
		out, ssTime := timeSS(b, nsPath)
		if est := bytes.Count(out, []byte("ESTAB")); est != 2*st.conns {
			b.Fatalf("ss -tan shows %d established sockets, want %d", est, 2*st.conns)
		}
		if lines := bytes.Count(out, []byte("\n")); lines > 2*st.conns+100 { // + the helpers' listeners
			b.Fatalf("ss -tan shows %d sockets, want about %d", lines-1, 2*st.conns)
		}
		perSS[st.name] = float64(ssTime.Nanoseconds())
		b.Run(st.name, func(b *testing.B) {
			ctx := context.Background()
			var times []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := p.Read(ctx); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
			}
			// The median is the figure compared: the box is shared, and a
			// neighbour's burst moves the mean more than the probe does.
			slices.Sort(times)
			p50 := float64(times[len(times)/2].Nanoseconds())
			if old, ok := perRead[st.name]; !ok || p50 < old {
				perRead[st.name] = p50 // the least disturbed of -count runs
			}
			b.ReportMetric(p50, "p50-ns/read")
			b.ReportMetric(perSS[st.name], "ss-ns/op")
			b.ReportMetric(perSS[st.name]/p50, "ss/read")
		})
		// The one source that walks a socket hash: the LISTEN-only
		// inet_diag dump, on its own.
		b.Run("listeners/"+st.name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				// As a Read does: a fresh thread in the namespace each time.
				errc := make(chan error, 1)
				go func() {
					runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
					if err := unix.Setns(int(p.ns.Fd()), unix.CLONE_NEWNET); err != nil {
						errc <- err
						return
					}
					_, _, err := listeners(ctx, time.Now().Add(time.Second), dialNetlink, listenRequest)
					errc <- err
				}()
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	if r0, r50 := perRead["conns=0"], perRead["conns=50000"]; r0 > 0 && r50 > 0 {
		fmt.Printf("BenchmarkRead: least median Read at 50,000 connections / at 0 = %.2f (%.0f µs / %.0f µs; at 0 again after: %.0f µs, so %.2f against that; 10,000: %.0f µs); "+
			"ss -tan at 50,000 = %.1f ms = %.0f× Read\n",
			r50/r0, r50/1e3, r0/1e3, perRead["conns=0-after"]/1e3, r50/perRead["conns=0-after"], perRead["conns=10000"]/1e3,
			perSS["conns=50000"]/1e6, perSS["conns=50000"]/r50)
	}
}

// timeSS runs `ss -tan` in the namespace five times and returns the last
// output and the median time. ss is started from a thread inside the
// namespace, so the time is ss's own (and its process start), not that of
// `ip netns exec` setting up mounts.
func timeSS(b *testing.B, nsPath string) ([]byte, time.Duration) {
	b.Helper()
	var times []time.Duration
	var out []byte
	for i := 0; i < 5; i++ {
		inNS(b, nsPath, func() error {
			start := time.Now()
			o, err := exec.Command("ss", "-tan").Output()
			times = append(times, time.Since(start))
			out = o
			return err
		})
	}
	slices.Sort(times)
	return out, times[len(times)/2]
}

// startHelper starts the test binary in the namespace as a holder of
// conns connections, stopped when b ends.
func startHelper(b *testing.B, exe, netns string, conns int) *netnslab.Holder {
	b.Helper()
	cmd := exec.Command("ip", "netns", "exec", netns, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=hold", "NK_PROBE_CONNS="+strconv.Itoa(conns))
	h, err := netnslab.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stopHelper(b, h) })
	return h
}

func stopHelper(b *testing.B, h *netnslab.Holder) {
	if err := h.Stop(); err != nil {
		b.Error(err)
	}
}

// holdConnections is the helper process: it holds NK_PROBE_CONNS
// connections until its stdin closes.
func holdConnections() int {
	n, err := strconv.Atoi(os.Getenv("NK_PROBE_CONNS"))
	if err != nil || n <= 0 {
		fmt.Fprintf(os.Stderr, "NK_PROBE_CONNS=%q: want a count\n", os.Getenv("NK_PROBE_CONNS"))
		return 2
	}
	return netnslab.Hold(n, os.Stdin, os.Stdout, os.Stderr)
}
