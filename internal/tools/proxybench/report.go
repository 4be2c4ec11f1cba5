package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func report(w io.Writer, o options, targets []*target, res results) {
	// row prints t's median of metric under label, then each round's
	// figure.
	row := func(label string, t *target, metric, format string) {
		v := res[metric][t.name]
		if len(v) == 0 {
			return
		}
		var each []string
		for _, x := range v {
			each = append(each, fmt.Sprintf(format, x))
		}
		fmt.Fprintf(w, "  %-36s %10s   (%s)\n", label, fmt.Sprintf(format, median(v)), strings.Join(each, " "))
	}
	rows := func(metric, format string) {
		for _, t := range targets {
			row(t.label, t, metric, format)
		}
	}
	// ratioOf prints num's median over of's, and PASS/MISS against want
	// (0: no target).
	ratioOf := func(metric, num, numLabel, name, of string, higherBetter bool, want float64) {
		a, b := res[metric][num], res[metric][of]
		if len(a) == 0 || len(b) == 0 || median(b) == 0 {
			return
		}
		r := median(a) / median(b)
		line := fmt.Sprintf("  %s / %-*s %6.2f", numLabel, 38-len(numLabel), name, r)
		if want > 0 {
			ok := r >= want
			if !higherBetter {
				ok = r <= want
			}
			line += fmt.Sprintf("   target %s %g: %s", map[bool]string{true: "≥", false: "≤"}[higherBetter], want, passMiss(ok))
		}
		fmt.Fprintln(w, line)
	}
	ratio := func(metric, name, of string, higherBetter bool, want float64) {
		ratioOf(metric, "pinproxy", "pinproxy", name, of, higherBetter, want)
	}

	fmt.Fprintf(w, "\nthroughput, MiB/s: %d streams client→proxy→sink, %s each, median of %d rounds (each round)\n", o.streams, o.duration, o.rounds)
	rows(mThroughput, "%.0f")
	ratio(mThroughput, "HAProxy", "haproxy", true, 0.95)
	ratioOf(mThroughput, "pinproxy-nolog", "pinproxy, no log", "HAProxy, no log", "haproxy-nolog", true, 0)
	ratio(mThroughput, "HAProxy, splice forced", "haproxy-force", true, 0)
	ratio(mThroughput, "direct", "direct", true, 0.45)
	fmt.Fprintf(w, "  proxy CPU time per GiB moved, ms (user+system, /proc/PID/stat; steadier than MiB/s on a busy machine)\n")
	rows(mBulkCPU, "%.0f")

	fmt.Fprintf(w, "\nconnection rate, conn/s: %d clients for %s; each connection: connect, write 1 byte, read the upstream's echo, close\n", o.clients, o.duration)
	rows(mConnRate, "%.0f")
	ratio(mConnRate, "HAProxy", "haproxy", true, 1.0)
	ratioOf(mConnRate, "pinproxy-nolog", "pinproxy, no log", "HAProxy, no log", "haproxy-nolog", true, 0)
	ratioOf(mConnRate, "pinproxy-nolog", "pinproxy, no log", "pinproxy", "pinproxy", true, 0)
	ratioOf(mConnRate, "haproxy-nolog", "HAProxy, no log", "HAProxy", "haproxy", true, 0)
	ratio(mConnRate, "HAProxy, splice forced", "haproxy-force", true, 0)
	ratio(mConnRate, "direct", "direct", true, 0)
	ratioOf(mConnRate, "floor", "epoll floor", "HAProxy", "haproxy", true, 0)
	ratioOf(mConnRate, "pinproxy", "pinproxy", "epoll floor", "floor", true, 0)
	fmt.Fprintf(w, "  proxy CPU time per connection, µs (user+system, /proc/PID/stat)\n")
	rows(mConnCPU, "%.0f")
	ratio(mConnCPU, "HAProxy", "haproxy", false, 0)
	ratioOf(mConnCPU, "pinproxy-nolog", "pinproxy, no log", "HAProxy, no log", "haproxy-nolog", false, 0)
	ratioOf(mConnCPU, "floor", "epoll floor", "HAProxy", "haproxy", false, 0)
	ratioOf(mConnCPU, "pinproxy", "pinproxy", "epoll floor", "floor", false, 0)
	if len(res[mConnClientCPU]) > 0 {
		fmt.Fprintf(w, "  the rest of the pipeline in the same time: the clients' CPU per connection, µs (this process)\n")
		rows(mConnClientCPU, "%.0f")
		fmt.Fprintf(w, "  the sink's CPU per connection, µs\n")
		rows(mConnSinkCPU, "%.0f")
		fmt.Fprintf(w, "  the pipeline's CPU per connection, µs (proxy + clients + sink)\n")
		rows(mConnPipeCPU, "%.0f")
		ratioOf(mConnPipeCPU, "pinproxy", "pinproxy", "HAProxy", "haproxy", false, 0)
		fmt.Fprintf(w, "  the pipeline's share of the machine's CPU, %% (its CPU over the time × CPUs; rate = share × CPUs / the pipeline's CPU a connection)\n")
		rows(mConnShare, "%.0f")
		ratio(mConnShare, "HAProxy", "haproxy", true, 0)
		fmt.Fprintf(w, "  the machine's CPUs busy, %% (every process, the machine's other jobs too)\n")
		rows(mConnBusy, "%.0f")
	}
	for _, t := range targets {
		if f := res[mConnFailed][t.name]; slices.ContainsFunc(f, func(x float64) bool { return x > 0 }) {
			fmt.Fprintf(w, "  %s: failed connections per round: %v\n", t.label, f)
		}
	}

	fmt.Fprintf(w, "\nmemory per idle proxied connection, KiB: (VmRSS with N idle − before) / N; each connection echoed 1 byte first\n")
	for _, t := range targets {
		if len(res[mIdleN][t.name]) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s, N = %.0f\n", t.label, median(res[mIdleN][t.name]))
		for _, r := range []struct{ label, metric, format string }{
			{"VmRSS KiB/conn", mIdleRSS, "%.1f"},
			{"Go heap+stack in use KiB/conn", mIdleGo, "%.1f"},
			{"of which stacks KiB/conn", mIdleStack, "%.1f"},
			{"open fds/conn", mIdleFDs, "%.2f"},
			{"goroutines/conn", mIdleGs, "%.2f"},
			{"VmRSS KiB/conn after 2 GCs, freed pages returned", mIdleGCRSS, "%.1f"},
			{fmt.Sprintf("parked (idle %s): VmRSS KiB/conn", o.parked), mParkedRSS, "%.1f"},
			{"parked: Go heap+stack in use KiB/conn", mParkedGo, "%.1f"},
			{"parked: of which stacks KiB/conn", mParkedStk, "%.1f"},
			{"parked: goroutines/conn", mParkedGs, "%.2f"},
			{"parked: runtime off-heap (pollDescs) KiB/conn", mParkedPoll, "%.2f"},
		} {
			row("  "+r.label, t, r.metric, r.format)
		}
	}
	if v := res[mIdleRSS]["pinproxy"]; len(v) > 0 {
		fmt.Fprintf(w, "  pinproxy VmRSS per idle connection %10.1f KiB   target ≤ 1.5 KiB: %s\n", median(v), passMiss(median(v) <= 1.5))
		ratio(mIdleRSS, "HAProxy", "haproxy", false, 0)
	}
	if v := res[mParkedRSS]["pinproxy"]; len(v) > 0 {
		fmt.Fprintf(w, "  pinproxy VmRSS per parked connection %8.1f KiB   target ≤ 1.5 KiB: %s\n", median(v), passMiss(median(v) <= 1.5))
		if h := res[mIdleRSS]["haproxy"]; len(h) > 0 && median(h) > 0 {
			fmt.Fprintf(w, "  pinproxy parked / HAProxy idle %14.2f\n", median(v)/median(h))
		}
	}
}

func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// summary prints the medians as one markdown table, for a README.
func summary(w io.Writer, targets []*target, res results) {
	type line struct {
		name, metric, format string
		want                 float64 // pinproxy/HAProxy target; 0: none
		abs                  bool    // want is a limit on pinproxy's own figure, not a ratio
	}
	lines := []line{
		{"throughput, MiB/s", mThroughput, "%.0f", 0.95, false},
		{"CPU per GiB, ms", mBulkCPU, "%.0f", 0, false},
		{"connections/s", mConnRate, "%.0f", 1.0, false},
		{"CPU per connection, µs", mConnCPU, "%.0f", 0, false},
		{"idle memory, KiB/conn (VmRSS)", mIdleRSS, "%.1f", 1.5, true},
		{"goroutines/conn, idle", mIdleGs, "%.2f", 0, false},
		{"parked (idle 1 min) memory, KiB/conn (VmRSS)", mParkedRSS, "%.1f", 1.5, true},
		{"goroutines/conn, parked", mParkedGs, "%.2f", 0, false},
		{"idle fds/conn", mIdleFDs, "%.1f", 0, false},
	}
	fmt.Fprintf(w, "\n| medians |")
	for _, t := range targets {
		fmt.Fprintf(w, " %s |", t.label)
	}
	_, forced := res[mThroughput]["haproxy-force"]
	if !forced {
		_, forced = res[mConnRate]["haproxy-force"]
	}
	_, nolog := res[mConnRate]["pinproxy-nolog"]
	if nolog {
		_, nolog = res[mConnRate]["haproxy-nolog"]
	}
	fmt.Fprintf(w, " pinproxy / HAProxy | target |")
	if nolog {
		fmt.Fprintf(w, " no log: pinproxy / HAProxy |")
	}
	if forced {
		fmt.Fprintf(w, " pinproxy / HAProxy, splice forced |")
	}
	fmt.Fprintf(w, "\n|---|")
	for range targets {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintf(w, "---:|---|")
	if nolog {
		fmt.Fprintf(w, "---:|")
	}
	if forced {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, l := range lines {
		fmt.Fprintf(w, "| %s |", l.name)
		for _, t := range targets {
			if v := res[l.metric][t.name]; len(v) > 0 {
				fmt.Fprintf(w, " "+l.format+" |", median(v))
			} else {
				fmt.Fprintf(w, " – |")
			}
		}
		p, h := res[l.metric]["pinproxy"], res[l.metric]["haproxy"]
		ratioOf := func(h []float64) string {
			if len(p) > 0 && len(h) > 0 && median(h) != 0 {
				return fmt.Sprintf("%.2f", median(p)/median(h))
			}
			return "–"
		}
		r := ratioOf(h)
		target := ""
		switch {
		case l.want > 0 && l.abs && len(p) > 0:
			target = fmt.Sprintf("≤ %g KiB: %s", l.want, passMiss(median(p) <= l.want))
		case l.want > 0 && r != "–":
			target = fmt.Sprintf("≥ %g×: %s", l.want, passMiss(median(p)/median(h) >= l.want))
		}
		fmt.Fprintf(w, " %s | %s |", r, target)
		if nolog {
			if pn, hn := res[l.metric]["pinproxy-nolog"], res[l.metric]["haproxy-nolog"]; len(pn) > 0 && len(hn) > 0 && median(hn) != 0 {
				fmt.Fprintf(w, " %.2f |", median(pn)/median(hn))
			} else {
				fmt.Fprintf(w, " – |")
			}
		}
		if forced {
			fmt.Fprintf(w, " %s |", ratioOf(res[l.metric]["haproxy-force"]))
		}
		fmt.Fprintln(w)
	}
}
