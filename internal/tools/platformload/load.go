package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proofkit/nodekit/overload"
)

// loadConfig is one load run: nodes agents, each reporting every interval
// to the replicas in urls (an agent whose replica fails goes on to the
// next, as behind a load balancer).
type loadConfig struct {
	urls     []string
	nodes    int
	interval time.Duration
	// warm is the time before measuring (every node has reported once by
	// then, so the fleet's rows exist); measure the time measured.
	warm, measure time.Duration
	// overloadEvery: every overloadEvery-th node's memory goes over 90 %
	// for 3 readings in 6 and back, so it enters overload and leaves it.
	overloadEvery int
	// atMeasure, if set, is called when the measured time begins;
	// midWarm, if set, half-way through the warm-up, in a goroutine of
	// its own.
	atMeasure, midWarm func()
	// inFlight bounds concurrent requests (a generator that cannot keep up
	// says so: its readings go late, which the latencies count).
	inFlight int
}

// nodeName and nodeToken are the i-th simulated node's name and token.
func nodeName(i int) string  { return fmt.Sprintf("n%06d", i) }
func nodeToken(i int) string { return fmt.Sprintf("tok-%06d-load", i) }

// result is what a run measured.
type result struct {
	Nodes, Replicas int
	Seconds         float64
	Sent            int64 // readings whose first attempt fell in the measured time
	Acked           int64 // of those, acknowledged (counted or duplicate)
	Duplicates      int64
	Refused         map[string]int64
	Retries         int64 // attempts after a failure (5xx, connection)
	Late            int64 // readings sent later than their slot (the node's previous reading still unanswered)
	P50, P99, Max   time.Duration
	// perNode: for the fault tests, readings acknowledged by node.
	perNode []atomic.Int64
	// platformCPU and serverCPU: the replicas' and PostgreSQL's CPU over
	// the measured time (filled in by oneRun).
	platformCPU, serverCPU time.Duration
	// platformParts: each part's share of the replicas' profiles;
	// serverKinds: PostgreSQL's CPU by process; statements and commits:
	// the database's counts; waits: its sessions by wait event. All over
	// the measured time, nil or zero when not taken.
	platformParts       map[string]float64
	serverKinds         map[string]time.Duration
	statements, commits int64
	stmtsKnown          bool
	walBytes, walFPI    int64
	byStatement         map[string]stmtUse // calls and time by statement (statementKey)
	upd, hotUpd         int64              // the nodes table's rows updated, and in place (HOT)
	waits               string
	perfTop             string   // perf report of PostgreSQL, with -perf
	rss                 []uint64 // each replica's resident memory at the end, bytes
	steal               float64  // the machine's CPU time stolen by its hypervisor over the measured time, a fraction
}

func (r *result) rate() float64 { return float64(r.Acked) / r.Seconds }

// agent is one simulated node: its run, next seq, and readings queued.
type agent struct {
	i     int
	run   string
	seq   uint64
	mu    sync.Mutex
	busy  bool
	queue []overload.Reading
}

// runLoad drives cfg's fleet until ctx ends or warm+measure has passed.
// Latency is from a reading's slot (when the agent would send it) to its
// acknowledgement, retries included, so a platform that falls behind is
// not flattered by a generator waiting for it.
func runLoad(ctx context.Context, cfg loadConfig) (*result, error) {
	if cfg.inFlight <= 0 {
		cfg.inFlight = 2048
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.inFlight,
		MaxIdleConnsPerHost: cfg.inFlight,
		IdleConnTimeout:     90 * time.Second,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 15 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res := &result{Nodes: cfg.nodes, Replicas: len(cfg.urls), Refused: map[string]int64{},
		perNode: make([]atomic.Int64, cfg.nodes)}
	agents := make([]*agent, cfg.nodes)
	for i := range agents {
		b := make([]byte, 16)
		rand.Read(b)
		agents[i] = &agent{i: i, run: hex.EncodeToString(b)}
	}
	var (
		mu   sync.Mutex
		lats []time.Duration
		wg   sync.WaitGroup
		sem  = make(chan struct{}, cfg.inFlight)
	)
	start := time.Now()
	measureFrom, end := start.Add(cfg.warm), start.Add(cfg.warm+cfg.measure)
	ctx, cancel := context.WithDeadline(ctx, end.Add(30*time.Second)) // answers of the last slots
	defer cancel()

	// send delivers a's queue in order, one reading at a time, retrying
	// each until it is acknowledged or refused.
	send := func(a *agent) {
		defer wg.Done()
		for {
			a.mu.Lock()
			if len(a.queue) == 0 || ctx.Err() != nil {
				a.busy = false
				a.mu.Unlock()
				return
			}
			rd := a.queue[0]
			a.mu.Unlock()
			slot := rd.At
			measured := !slot.Before(measureFrom) && slot.Before(end)
			if measured {
				atomic.AddInt64(&res.Sent, 1)
			}
			reason, dup, attempts := deliver(ctx, client, cfg.urls, a.i, rd, sem)
			if attempts > 1 {
				atomic.AddInt64(&res.Retries, int64(attempts-1))
			}
			lat := time.Since(slot)
			switch {
			case reason == "":
				res.perNode[a.i].Add(1)
				if measured {
					atomic.AddInt64(&res.Acked, 1)
					if dup {
						atomic.AddInt64(&res.Duplicates, 1)
					}
					mu.Lock()
					lats = append(lats, lat)
					mu.Unlock()
				}
			case reason == "canceled":
			default:
				mu.Lock()
				res.Refused[reason]++
				mu.Unlock()
			}
			a.mu.Lock()
			a.queue = a.queue[1:]
			a.mu.Unlock()
		}
	}

	// The schedule: node i reports at start + i·interval/nodes, then
	// every interval.
	step := cfg.interval / time.Duration(cfg.nodes)
	tick := time.NewTicker(min(step*time.Duration(max(1, cfg.nodes/1000)), 10*time.Millisecond))
	defer tick.Stop()
	next := 0 // index of the next slot, over all nodes and rounds
	measuring, midWarmed := false, false
	for time.Now().Before(end) && ctx.Err() == nil {
		now := time.Now()
		if !midWarmed && !now.Before(start.Add(cfg.warm/2)) {
			midWarmed = true
			if cfg.midWarm != nil {
				wg.Go(cfg.midWarm)
			}
		}
		if !measuring && !now.Before(measureFrom) {
			measuring = true
			if cfg.atMeasure != nil {
				cfg.atMeasure()
			}
		}
		for ; ; next++ {
			slot := start.Add(time.Duration(next) * step)
			if slot.After(now) || !slot.Before(end) {
				break
			}
			a := agents[next%cfg.nodes]
			a.seq++
			rd := reading(a, slot, cfg.overloadEvery)
			a.mu.Lock()
			a.queue = append(a.queue, rd)
			if a.busy {
				atomic.AddInt64(&res.Late, 1)
			} else {
				a.busy = true
				wg.Add(1)
				go send(a)
			}
			a.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	wg.Wait()
	res.Seconds = cfg.measure.Seconds()
	slices.Sort(lats)
	if n := len(lats); n > 0 {
		res.P50, res.P99, res.Max = lats[n/2], lats[min(n-1, n*99/100)], lats[n-1]
	}
	return res, nil
}

// reading is agent a's reading for slot: version 2, its run and seq,
// memory over 90 % in 3 of every 6 readings for the overloading nodes,
// from their first (so their overload starts at their third reading).
func reading(a *agent, slot time.Time, overloadEvery int) overload.Reading {
	mem := 40.0
	if overloadEvery > 0 && a.i%overloadEvery == 0 && ((a.seq-1)/3)%2 == 0 {
		mem = 95
	}
	return overload.Reading{
		Version: overload.ReadingVersion, Node: nodeName(a.i), At: slot.UTC().Truncate(time.Microsecond),
		Run: a.run, Seq: a.seq,
		MemoryUsedPercent: mem, CPUs: 4, Load15: 1.5,
		ConntrackEntries: 1000, ConntrackMax: 262144,
		Missing: []overload.Input{overload.InputBandwidth},
	}
}

// deliver sends rd with node i's token until it is acknowledged or
// refused, moving to the next replica after a failure. It returns the
// refusal's reason ("" when acknowledged), whether it was a duplicate, and
// the attempts made.
func deliver(ctx context.Context, client *http.Client, urls []string, i int, rd overload.Reading, sem chan struct{}) (string, bool, int) {
	body, err := json.Marshal(rd)
	if err != nil {
		return "invalid", false, 0
	}
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		url := urls[(i+attempt-1)%len(urls)]
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return "canceled", false, attempt
		}
		status, reason, dup, err := post(ctx, client, url, nodeToken(i), body)
		<-sem
		switch {
		case err == nil && status < 300:
			return "", dup, attempt
		case err == nil && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests && status < 500 &&
			status != http.StatusUnauthorized && status != http.StatusForbidden:
			return reason, false, attempt
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return "canceled", false, attempt
		}
		backoff = min(2*backoff, time.Second)
	}
}

func post(ctx context.Context, client *http.Client, url, token string, body []byte) (int, string, bool, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/report", bytes.NewReader(body))
	if err != nil {
		return 0, "", false, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, "", false, err
	}
	var ans struct {
		Duplicate bool   `json:"duplicate"`
		Reason    string `json:"reason"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		return resp.StatusCode, "", false, fmt.Errorf("answer %d: %w", resp.StatusCode, errors.Join(err, errors.New(string(b))))
	}
	return resp.StatusCode, ans.Reason, ans.Duplicate, nil
}
