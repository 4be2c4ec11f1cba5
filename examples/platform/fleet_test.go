package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/pgtest"
	"github.com/proofkit/nodekit/internal/testkit"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// The tests in this file run the built platform as real processes: two
// replicas on one PostgreSQL database, or one process on a state
// directory, and send them requests over loopback as clients would.

var (
	buildOnce sync.Once
	binDir    string // removed by TestMain
	binPath   string
	buildErr  error
)

// platformBinary builds this package's command once per test run.
func platformBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "platform-bin-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "platform")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// replica is one running platform process.
type replica struct {
	t    testing.TB
	base string
	args []string
	proc *testkit.Proc
}

var fleetClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
}

// startReplica starts the built platform with args (beside -listen and
// -token-file) and waits for it to answer /healthz.
func startReplica(t testing.TB, args ...string) *replica {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tok, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testkit.FreeAddr(t)
	all := append([]string{"-listen", addr, "-token-file", tok}, args...)
	r := &replica{t: t, base: "http://" + addr, args: all}
	r.proc = testkit.StartProc(t, exec.Command(platformBinary(t), all...), nil)
	r.waitUp()
	return r
}

func (r *replica) waitUp() {
	r.t.Helper()
	testkit.WaitForWithin(r.t, time.Minute, "the platform at "+r.base+" to answer /healthz", func() bool {
		select {
		case <-r.proc.Done():
			r.t.Fatalf("the platform ended:\n%s", r.proc.Log.String())
		default:
		}
		resp, err := fleetClient.Get(r.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// do sends body as JSON (none when nil) with the operator's token and
// returns the status and the answer; a request that got no answer is
// status 0 with the error as the answer.
func (r *replica) do(method, path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			panic(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.base+path, rd)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := fleetClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// get decodes a 200 answer to GET path into out.
func (r *replica) get(path string, out any) {
	r.t.Helper()
	code, b := r.do("GET", path, nil)
	if code != 200 {
		r.t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		r.t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

func (r *replica) view(id string) nodeView {
	r.t.Helper()
	var v nodeView
	r.get("/nodes/"+id, &v)
	return v
}

// fleet is what the suite runs against: two targets for the two requests
// of a pair (two replicas on one database, or one process twice).
type fleet struct {
	name string
	a, b *replica
	url  string // the database; "" for the file store
	// start starts another replica with extra flags on the same store.
	start func(extra ...string) *replica
}

// writeSeed writes s to a temporary file for -routes.
func writeSeed(t testing.TB, s *seedFile) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// eachFleet runs test on two replicas on PostgreSQL (skipped without it)
// and on one process on the file store, each started with seed and flags.
func eachFleet(t *testing.T, seed *seedFile, flags []string, test func(t *testing.T, f *fleet)) {
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Need(t, cluster).NewDatabase(t)
		routes := writeSeed(t, seed)
		start := func(extra ...string) *replica {
			return startReplica(t, append(append([]string{"-db", url, "-routes", routes}, flags...), extra...)...)
		}
		f := &fleet{name: "postgres", url: url, start: start}
		f.a, f.b = start(), start()
		test(t, f)
	})
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		routes := writeSeed(t, seed)
		start := func(extra ...string) *replica {
			return startReplica(t, append(append([]string{"-state-dir", dir, "-routes", routes}, flags...), extra...)...)
		}
		f := &fleet{name: "file", start: start}
		f.a = start()
		f.b = f.a
		test(t, f)
	})
}

// answer is one request's outcome in a pair.
type answer struct {
	code int
	body []byte
}

// pair runs x and y at once (both released together) and returns their
// answers.
func pair(x, y func() answer) (answer, answer) {
	var ax, ay answer
	var wg sync.WaitGroup
	gate := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); <-gate; ax = x() }()
	go func() { defer wg.Done(); <-gate; ay = y() }()
	close(gate)
	wg.Wait()
	return ax, ay
}

func call(r *replica, method, path string, body any) func() answer {
	return func() answer {
		code, b := r.do(method, path, body)
		return answer{code, b}
	}
}

// trials is how many times each pair of requests meets.
const trials = 100

// runID is the run of every reading the suite sends.
const runID = "0123456789abcdef0123456789abcdef"

func reading(node string, seq int, mem float64) overload.Reading {
	return overload.Reading{Version: 2, Node: node, Run: runID, Seq: uint64(seq), At: time.Now().Round(0),
		MemoryUsedPercent: mem, CPUs: 4, ConntrackMax: 262144}
}

// TestFleetTrafficTraffic: two charges of one route at once, on two
// replicas: every acknowledged charge is stored once.
func TestFleetTrafficTraffic(t *testing.T) {
	seed := &seedFile{
		Nodes:  []routing.Node{{ID: "tt", Role: routing.RoleExit, Country: "DE", Price: 100}},
		Routes: []routing.Route{{ID: "tt-r", User: "u", Key: "k", Node: "tt", Kind: routing.KindOwn, Start: time.Now().Add(-time.Hour), LastTraffic: time.Now()}},
	}
	eachFleet(t, seed, nil, func(t *testing.T, f *fleet) {
		acked := uint64(0)
		for range trials {
			x, y := pair(call(f.a, "POST", "/traffic", trafficRequest{Route: "tt-r", Bytes: 1000}),
				call(f.b, "POST", "/traffic", trafficRequest{Route: "tt-r", Bytes: 1000}))
			for _, a := range []answer{x, y} {
				switch a.code {
				case 200:
					acked += 1000
				case 503:
				default:
					t.Fatalf("POST /traffic: %d %s", a.code, a.body)
				}
			}
		}
		v := f.a.view("tt")
		if len(v.Routes) != 1 {
			t.Fatalf("%d live routes, want 1", len(v.Routes))
		}
		if got := v.Routes[0].Earned.Bytes; got != acked {
			t.Errorf("%d bytes stored of %d acknowledged: %d charges lost", got, acked, (acked-got)/1000)
		}
	})
}

// TestFleetRoutesRoutes: two routes opened at once through a node that
// takes one user: at most one is admitted.
func TestFleetRoutesRoutes(t *testing.T) {
	seed := &seedFile{}
	for i := range trials {
		seed.Nodes = append(seed.Nodes, routing.Node{ID: fmt.Sprintf("rr-%d", i), Role: routing.RoleExit, Country: "DE", Price: 100, MaxUsers: 1})
	}
	eachFleet(t, seed, nil, func(t *testing.T, f *fleet) {
		over := 0
		for i := range trials {
			id := fmt.Sprintf("rr-%d", i)
			x, y := pair(call(f.a, "POST", "/routes", openRequest{Node: id, User: "ua", Key: "k"}),
				call(f.b, "POST", "/routes", openRequest{Node: id, User: "ub", Key: "k"}))
			opened := 0
			for _, a := range []answer{x, y} {
				switch a.code {
				case 201:
					opened++
				case 409, 503:
				default:
					t.Fatalf("POST /routes: %d %s", a.code, a.body)
				}
			}
			v := f.a.view(id)
			if opened > 1 || v.LiveUsers > 1 {
				over++
			}
		}
		if over > 0 {
			t.Errorf("max_users 1 exceeded on %d of %d nodes", over, trials)
		}
	})
}

func joinArgs(args []string) string { return strings.Join(args, " ") }
