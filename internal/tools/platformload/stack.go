package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The packages buildPlatform builds: the platform, and the floor.
const (
	platformPkg = "github.com/proofkit/nodekit/examples/platform"
	floorPkg    = "github.com/proofkit/nodekit/internal/tools/platformload/floor"
)

// buildPlatform builds pkg (examples/platform, or the floor) into dir.
func buildPlatform(dir, pkg string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the platform: %w: %s", err, out)
	}
	return bin, nil
}

// writeFleet writes the token file (the admin's token, then one token a
// node) and the route table: every node an exit in one of 4 countries
// (by hundreds, so neighbours share one), each with two of its users'
// routes: one unused for 3 hours (closed when the node is overloaded),
// one in use whose user holds the same route through the previous node.
func writeFleet(dir string, nodes int, now time.Time) (tokenFile, routeFile string, err error) {
	var tb bytes.Buffer
	tb.WriteString(adminToken + "\n")
	for i := range nodes {
		fmt.Fprintf(&tb, "%s %s\n", nodeToken(i), nodeName(i))
	}
	tokenFile = filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokenFile, tb.Bytes(), 0o600); err != nil {
		return "", "", err
	}
	type node struct {
		ID      string `json:"id"`
		Role    string `json:"role"`
		Country string `json:"country"`
		Price   int    `json:"price"`
	}
	type route struct {
		ID          string    `json:"id"`
		User        string    `json:"user"`
		Key         string    `json:"key"`
		Node        string    `json:"node"`
		Start       time.Time `json:"start"`
		LastTraffic time.Time `json:"last_traffic"`
	}
	var seed struct {
		Nodes  []node  `json:"nodes"`
		Routes []route `json:"routes"`
	}
	start := now.Add(-4 * time.Hour)
	for i := range nodes {
		id := nodeName(i)
		seed.Nodes = append(seed.Nodes, node{ID: id, Role: "exit", Country: []string{"DE", "NL", "FR", "US"}[i/100%4], Price: 100})
		seed.Routes = append(seed.Routes,
			route{ID: id + "-a", User: fmt.Sprintf("u%d", i), Key: "vpn", Node: id, Start: start, LastTraffic: now.Add(-3 * time.Hour)},
			route{ID: id + "-b", User: fmt.Sprintf("u%d", (i+1)%nodes), Key: "vpn", Node: id, Start: start, LastTraffic: now.Add(-time.Minute)})
	}
	b, err := json.Marshal(seed)
	if err != nil {
		return "", "", err
	}
	routeFile = filepath.Join(dir, "routes.json")
	return tokenFile, routeFile, os.WriteFile(routeFile, b, 0o600)
}

// adminToken is the load's admin token, the platform's own (for GET
// /nodes).
const adminToken = "load-admin-token"

// replica is one running platform process.
type replica struct {
	cmd *exec.Cmd
	URL string
	// debugURL serves the replica's profiles (-debug-listen); "" without.
	debugURL string
	done     chan struct{}
	mu       sync.Mutex
	log      bytes.Buffer // the last 64 KiB
}

// startReplica runs the platform binary with args and waits for it to
// serve (its "platform serving" log line, which names its address).
func startReplica(ctx context.Context, bin string, args ...string) (*replica, error) {
	r := &replica{cmd: exec.Command(bin, append([]string{"-listen", "127.0.0.1:0", "-log-format", "json"}, args...)...), done: make(chan struct{})}
	pr, pw := io.Pipe()
	r.cmd.Stdout, r.cmd.Stderr = pw, pw
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	debug := "" // set before addr is sent
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var l struct {
				Msg       string `json:"msg"`
				Addr      string `json:"addr"`
				DebugAddr string `json:"debug_addr"`
			}
			if json.Unmarshal(line, &l) == nil {
				switch l.Msg {
				case "profiles served":
					debug = "http://" + l.DebugAddr
				case "platform serving":
					addr <- l.Addr
				}
			}
			r.mu.Lock()
			if r.log.Len() > 64<<10 {
				r.log.Next(r.log.Len() - 32<<10)
			}
			r.log.Write(line)
			r.log.WriteByte('\n')
			r.mu.Unlock()
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		r.cmd.Wait()
		pw.Close()
		close(r.done)
	}()
	select {
	case a := <-addr:
		r.URL, r.debugURL = "http://"+a, debug
		return r, nil
	case <-r.done:
		return nil, fmt.Errorf("platform exited: %s", r.output())
	case <-time.After(5 * time.Minute):
		r.kill()
		return nil, fmt.Errorf("platform did not start serving in 5 minutes: %s", r.output())
	case <-ctx.Done():
		r.kill()
		return nil, ctx.Err()
	}
}

func (r *replica) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

// kill ends the replica with SIGKILL and waits for it.
func (r *replica) kill() {
	r.cmd.Process.Kill()
	<-r.done
}

// stop ends the replica with SIGTERM (SIGKILL after 10 s).
func (r *replica) stop() error {
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.kill()
		return errors.New("did not stop on SIGTERM")
	}
	if code := r.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("exit status %d: %s", code, lastLines(r.output(), 5))
	}
	return nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
