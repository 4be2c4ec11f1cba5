package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// The linearizability check: clients send one node's requests at once
// to the replicas, each request's invocation and answer are recorded, and
// the history of each node must be one a single node, taking the requests
// one at a time, could give (porcupine checks it against linNodeModel).
// A request without an answer (a replica killed, the database
// restarting: no answer, 503, or 500) may have taken effect or not, at
// any time after it was sent: it is recorded with no return.

const (
	linNodes    = 3
	linRoutes   = 2 // seeded routes of each node, users u0 and u1
	linMaxUsers = 5
	linClients  = 6
)

// linState is one node as the model sees it.
type linState struct {
	readings int
	maxSeq   uint64
	users    int
	earned   [linRoutes]uint64
	price    pricing.Price
}

type linKind int

const (
	linReport linKind = iota
	linOpen
	linTraffic
	linView
	linPrice
)

type linInput struct {
	node  int
	kind  linKind
	seq   uint64        // report
	route int           // traffic
	bytes uint64        // traffic
	price pricing.Price // price
}

type linOutput struct {
	known    bool // an answer came; otherwise the request may or may not have taken effect
	dup      bool // report: answered as a duplicate
	admitted bool // open: 201 (else 409 full)
	earned   uint64
	view     linState // view: what GET /nodes/X showed
}

// linStep is what one request does to s, if it is taken.
func linStep(s linState, in linInput) linState {
	switch in.kind {
	case linReport:
		if in.seq > s.maxSeq {
			s.readings++
			s.maxSeq = in.seq
		}
	case linOpen:
		if s.users < linMaxUsers {
			s.users++
		}
	case linTraffic:
		s.earned[in.route] += in.bytes
	case linPrice:
		s.price = in.price
	}
	return s
}

var linNodeModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := make([][]porcupine.Operation, linNodes)
		for _, op := range h {
			n := op.Input.(linInput).node
			by[n] = append(by[n], op)
		}
		return by
	},
	Init: func() []any { return []any{linState{users: linRoutes, price: 100}} },
	Hash: func(state any) uint64 {
		s := state.(linState)
		h := uint64(s.readings)*1e6 + s.maxSeq*1e3 + uint64(s.users) + uint64(s.price)*7
		for _, e := range s.earned {
			h = h*31 + e
		}
		return h
	},
	Step: func(state, input, output any) []any {
		s, in, out := state.(linState), input.(linInput), output.(linOutput)
		next := linStep(s, in)
		if !out.known {
			return []any{s, next}
		}
		ok := true
		switch in.kind {
		case linReport:
			ok = out.dup == (in.seq <= s.maxSeq)
		case linOpen:
			ok = out.admitted == (s.users < linMaxUsers)
		case linTraffic:
			ok = out.earned == next.earned[in.route]
		case linView:
			v := out.view
			v.maxSeq = s.maxSeq // not shown
			ok = v == s
		}
		if !ok {
			return nil
		}
		return []any{next}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		res := "?"
		switch {
		case !out.known:
		case in.kind == linReport:
			res = map[bool]string{true: "duplicate", false: "counted"}[out.dup]
		case in.kind == linOpen:
			res = map[bool]string{true: "201", false: "409 full"}[out.admitted]
		case in.kind == linTraffic:
			res = fmt.Sprintf("earned %d", out.earned)
		case in.kind == linView:
			res = fmt.Sprintf("%+v", out.view)
		}
		switch in.kind {
		case linReport:
			return fmt.Sprintf("report seq %d → %s", in.seq, res)
		case linOpen:
			return "open → " + res
		case linTraffic:
			return fmt.Sprintf("traffic r%d +%d → %s", in.route, in.bytes, res)
		case linPrice:
			return fmt.Sprintf("price %d → %s", in.price, res)
		default:
			return "view → " + res
		}
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(linState)) },
}

func linNodeID(n int) string     { return fmt.Sprintf("lin-%d", n) }
func linRouteID(n, r int) string { return fmt.Sprintf("lin-%d-r%d", n, r) }
func linSeed() *store.SeedFile {
	s := &store.SeedFile{}
	for n := range linNodes {
		s.Nodes = append(s.Nodes, routing.Node{ID: linNodeID(n), Role: routing.RoleExit, Country: "DE", Price: 100, MaxUsers: linMaxUsers})
		for r := range linRoutes {
			s.Routes = append(s.Routes, routing.Route{ID: linRouteID(n, r), User: fmt.Sprintf("u%d", r), Key: "k", Node: linNodeID(n),
				Kind: routing.KindOwn, Start: time.Now().Add(-time.Hour), LastTraffic: time.Now()})
		}
	}
	return s
}

// linHistory records the operations of a run.
type linHistory struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
	seq   [linNodes]uint64
	users int
	base  time.Time // readings are dated base + seq × 10 ms: later seqs later
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

// do sends one request of client c to r and records it.
func (h *linHistory) do(c int, r *replica, rng *rand.Rand) {
	in := linInput{node: rng.IntN(linNodes), kind: linKind(rng.IntN(5))}
	id := linNodeID(in.node)
	var method, path string
	var body any
	switch in.kind {
	case linReport:
		h.mu.Lock()
		h.seq[in.node]++
		in.seq = h.seq[in.node]
		h.mu.Unlock()
		// Now and then a retry of an earlier reading, sent again.
		if in.seq > 3 && rng.IntN(4) == 0 {
			in.seq -= uint64(rng.IntN(3))
		}
		rd := overload.Reading{Version: 2, Node: id, Run: platformtest.RunID, Seq: in.seq, At: h.base.Add(time.Duration(in.seq) * 10 * time.Millisecond),
			MemoryUsedPercent: 50, CPUs: 4, ConntrackMax: 262144}
		method, path, body = "POST", "/report", rd
	case linOpen:
		h.mu.Lock()
		h.users++
		u := h.users
		h.mu.Unlock()
		method, path, body = "POST", "/routes", fleet.OpenRequest{Node: id, User: fmt.Sprintf("c%d", u), Key: "k"}
	case linTraffic:
		in.route, in.bytes = rng.IntN(linRoutes), uint64(1+rng.IntN(1000))
		method, path, body = "POST", "/traffic", fleet.TrafficRequest{Route: linRouteID(in.node, in.route), Bytes: in.bytes}
	case linView:
		method, path = "GET", "/nodes/"+id
	case linPrice:
		in.price = pricing.Price(100 + rng.IntN(100))
		method, path, body = "POST", "/price", fleet.PriceRequest{Node: id, Price: in.price}
	}
	call := h.now()
	code, b := r.do(method, path, body)
	ret := h.now()
	out, err := linAnswer(in, code, b)
	if err != nil {
		r.t.Errorf("%s %s: %v", method, path, err)
	}
	if !out.known {
		// The client waits for the replica to answer again before its
		// next request, so a fault leaves a few requests of unknown
		// outcome, not hundreds.
		defer h.waitAnswers(r)
		if in.kind == linView || code == 0 && strings.Contains(string(b), "connection refused") {
			return // a read without an answer, or a request never sent, changed nothing
		}
		ret = math.MaxInt64
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// waitAnswers waits until r answers a read of the store (it runs on a
// client's goroutine: it fails the test with Errorf, not Fatal).
func (h *linHistory) waitAnswers(r *replica) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if code, _ := r.do("GET", "/nodes/"+linNodeID(0), nil); code == 200 {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling a replica coming back
	}
	r.t.Errorf("%s did not answer again within 2 minutes", r.base)
}

// linAnswer reads an answer; an answer no client should get is an error.
func linAnswer(in linInput, code int, b []byte) (linOutput, error) {
	switch code {
	case 0, 503: // no answer, or the store unavailable
		return linOutput{}, nil
	case 500:
		return linOutput{}, fmt.Errorf("%d %s", code, b)
	}
	out := linOutput{known: true}
	bad := fmt.Errorf("%d %s", code, b)
	switch in.kind {
	case linReport:
		var a struct {
			Duplicate bool `json:"duplicate"`
		}
		if code != 200 || json.Unmarshal(b, &a) != nil {
			return out, bad
		}
		out.dup = a.Duplicate
	case linOpen:
		if code != 201 && code != 409 {
			return out, bad
		}
		out.admitted = code == 201
	case linTraffic:
		var rt store.Route
		if code != 200 || json.Unmarshal(b, &rt) != nil {
			return out, bad
		}
		out.earned = rt.Earned.Bytes
	case linPrice:
		if code != 204 {
			return out, bad
		}
	case linView:
		var v fleet.NodeView
		if code != 200 || json.Unmarshal(b, &v) != nil {
			return out, bad
		}
		out.view = linState{readings: int(v.Readings), users: v.LiveUsers, price: v.Price}
		for _, rt := range v.Routes {
			for r := range linRoutes {
				if rt.Route.ID == linRouteID(in.node, r) {
					out.view.earned[r] = rt.Earned.Bytes
				}
			}
		}
	}
	return out, nil
}

// TestFleetLinearizable: each node's history of reports, route opens,
// charges, price changes and views, sent by six clients at once to two replicas on one
// PostgreSQL database (one process on the file store), is linearizable,
// also across a replica killed with SIGKILL and restarted, and (on
// PostgreSQL) the database restarted, mid-history. A history that is not
// is saved with porcupine's visualisation in the test's artifact
// directory (testkit.ArtifactDir).
func TestFleetLinearizable(t *testing.T) {
	eachFleet(t, linSeed(), []string{"-plan-every", "1h"}, func(t *testing.T, f *replicaSet) {
		h := &linHistory{start: time.Now(), base: time.Now().Add(-time.Hour)}
		const perClient = 150
		var wg sync.WaitGroup
		progress := make(chan struct{}, linClients*perClient)
		for c := range linClients {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(c), 1))
				for range perClient {
					r := f.a
					if rng.IntN(2) == 1 {
						r = f.b
					}
					h.do(c, r, rng)
					progress <- struct{}{}
				}
			})
		}
		// Faults, each once a third of the requests are answered: the
		// second replica killed and restarted, then the database
		// restarted.
		done := 0
		wait := func(n int) {
			for ; done < n; done++ {
				<-progress
			}
		}
		wait(linClients * perClient / 3)
		if f.b != f.a {
			f.b.restart()
		} else {
			f.a.restart()
		}
		if f.url != "" {
			wait(2 * linClients * perClient / 3)
			if err := pgtest.Need(t, cluster).Restart(); err != nil {
				t.Fatalf("restarting PostgreSQL: %v", err)
			}
		}
		wait(linClients * perClient)
		wg.Wait()
		checkLinearizable(t, h.ops)
	})
}

// restart kills the process with SIGKILL and starts it again, with the
// same flags, on the same address.
func (r *replica) restart() {
	r.t.Helper()
	r.proc.Kill()
	r.proc = testkit.StartProc(r.t, exec.Command(platformBinary(r.t), r.args...), nil)
	r.waitUp()
}

// checkLinearizable checks ops against linNodeModel; a history that is
// not linearizable is saved with its visualisation.
func checkLinearizable(t *testing.T, ops []porcupine.Operation) {
	t.Helper()
	model := linNodeModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("%d operations, linearizable", len(ops))
		return
	case porcupine.Unknown:
		t.Logf("%d operations: the checker ran out of time (not a failure)", len(ops))
		return
	}
	path := filepath.Join(testkit.ArtifactDir(t), "history.html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		t.Logf("visualisation: %v", err)
	}
	t.Errorf("%d operations: not linearizable; the history is in %s", len(ops), path)
}
