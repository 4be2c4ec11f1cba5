package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

var service = testkit.Build{Pkgs: []string{"."}}

func TestMain(m *testing.M) {
	code := m.Run()
	service.Clean()
	os.Exit(code)
}

// The service upgrades itself on SIGUSR2: the new process serves the
// same proxy listener and API listener, the clients connected before
// keep their connections, and the old process exits 0.
func TestUpgradesItself(t *testing.T) {
	bin := service.Bin(t, "embedded-proxy")
	up := pinproxytest.New(t, "eu-01", pinproxytest.Line)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-http", "127.0.0.1:0", "-upstream", up.Addr, "-stats-every", "0")
	cmd.Stderr = w // a file: the new process writes to it too
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan int, 1)
	go func() {
		cmd.Wait()
		exited <- cmd.ProcessState.ExitCode()
	}()
	var mu sync.Mutex
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	newPID := 0
	t.Cleanup(func() {
		cmd.Process.Kill()
		if newPID != 0 {
			syscall.Kill(newPID, syscall.SIGKILL)
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("the service's log:\n%s", log.String())
			mu.Unlock()
		}
	})
	find := func(re string) []string {
		var m []string
		testkit.WaitFor(t, re, func() bool {
			mu.Lock()
			defer mu.Unlock()
			m = regexp.MustCompile(re).FindStringSubmatch(log.String())
			return m != nil
		})
		return m
	}
	addr := find(`msg="proxy listening" .*?addr=(\S+)`)[1]
	api := find(`msg="http listening" .*?addr=(\S+)`)[1]
	var clients []*pinproxytest.Client
	for _, id := range []string{"c1", "c2", "c3"} {
		c, on := pinproxytest.Dial(t, addr, id)
		if on != "eu-01" {
			t.Fatalf("%s on %s", id, on)
		}
		clients = append(clients, c)
	}

	cmd.Process.Signal(syscall.SIGUSR2)
	newPID, _ = strconv.Atoi(find(`msg="upgrade: connections handed over" .*new_pid=(\d+)`)[1])
	find(`msg="upgrade: took over" .*from_pid=` + strconv.Itoa(cmd.Process.Pid) + ` conns=3`)
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("the old process exited %d, want 0", code)
		}
	case <-time.After(pinproxytest.WaitFor):
		t.Fatal("the old process did not exit")
	}
	for _, c := range clients {
		if on, err := c.Ping(); err != nil || on != "eu-01" {
			t.Fatalf("client %s after the upgrade: %q, %v", c.ID, on, err)
		}
	}
	if _, on := pinproxytest.Dial(t, addr, "c4"); on != "eu-01" {
		t.Fatalf("a new client after the upgrade: on %q", on)
	}
	resp, err := http.Get("http://" + api + "/proxy/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st statsView
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Totals.Live != 4 || st.Totals.Upgrades != 1 || st.Totals.Accepted != 4 {
		t.Fatalf("the new process's stats %+v, %v; want 4 live, 4 accepted, 1 upgrade", st.Totals, err)
	}
	syscall.Kill(newPID, syscall.SIGTERM)
	find(`msg=stopped`)
}
