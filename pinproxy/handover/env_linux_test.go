package handover

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The new process starts with SIGUSR2 blocked, so one sent before it
// can catch it (an operator's `kill -USR2 $(pidof server)` at the exec)
// waits for it instead of killing it. sleep never catches it at all.
func TestStartBlocksSIGUSR2(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1) to start")
	}
	p, err := stdEnv.start(sleep, []string{"30"}, os.Environ(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Kill(); <-p.Exited() }()
	if err := syscall.Kill(p.Pid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	bit := uint64(1) << (syscall.SIGUSR2 - 1)
	for _, l := range strings.Split(string(st), "\n") {
		name, v, ok := strings.Cut(l, ":")
		if !ok || (name != "SigBlk" && name != "ShdPnd") {
			continue
		}
		m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil || m&bit == 0 {
			t.Errorf("%s: %s; want SIGUSR2 (%#x) in it", name, strings.TrimSpace(v), bit)
		}
	}
	select {
	case <-p.Exited():
		t.Fatalf("the child exited: %v", p.Err())
	case <-time.After(100 * time.Millisecond):
	}
}

// A process that connected to a Socket is killed through its pidfd, and
// the pidfd is closed once the process has exited: each failed hand-over
// to such a process would otherwise keep a descriptor.
func TestWatchPeerKillsAndCloses(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1) to start")
	}
	before := openFDs(t)
	cmd := exec.Command(sleep, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { cmd.Wait(); close(reaped) }()
	p, err := watchPeer(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the killed process was not seen to exit")
	}
	<-reaped
	if err := p.Kill(); err != nil {
		t.Errorf("Kill after the exit: %v, want nil", err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after the process exited, %d before: the pidfd was kept", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}
