package testkit

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestWaitFor(t *testing.T) {
	start := time.Now()
	WaitFor(t, "a tenth of a second", func() bool { return time.Since(start) > 100*time.Millisecond })
	if time.Since(start) < 100*time.Millisecond {
		t.Fatal("WaitFor returned before the condition held")
	}
}

func TestLogBuffer(t *testing.T) {
	var b LogBuffer
	log := slog.New(slog.NewTextHandler(&b, nil))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			log.Info(fmt.Sprint("line ", i))
			_ = b.String()
		}()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 8 {
		t.Fatalf("%d lines, want 8", n)
	}
}

func TestFreeAddr(t *testing.T) {
	addr := FreeAddr(t)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on FreeAddr's %s: %v", addr, err)
	}
	ln.Close()
}

func TestStartProc(t *testing.T) {
	var lines []string
	p := StartProc(t, exec.Command("sh", "-c", "echo one; echo two >&2; exec sleep 60"), func(l string) { lines = append(lines, l) })
	WaitFor(t, "both lines", func() bool { return strings.Count(p.Log.String(), "\n") == 2 })
	p.Kill()
	if len(lines) != 2 || !strings.Contains(p.Log.String(), "one\n") || !strings.Contains(p.Log.String(), "two\n") {
		t.Fatalf("lines %q, log %q", lines, p.Log.String())
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Kill")
	}
}

func TestBuild(t *testing.T) {
	b := &Build{Pkgs: []string{"./testdata/hello"}, Flags: []string{"-tags", "loud"}, Env: []string{"CGO_ENABLED=0"}}
	t.Cleanup(b.Clean)
	bin := b.Bin(t, "hello")
	if again := b.Bin(t, "hello"); again != bin {
		t.Fatalf("second Bin %s, first %s: built twice", again, bin)
	}
	out, err := exec.Command(bin).Output()
	if err != nil || string(out) != "HELLO\n" {
		t.Fatalf("%s: %q, %v; want HELLO (built with -tags loud)", bin, out, err)
	}

	bad := &Build{Pkgs: []string{"./testdata/no-such"}}
	t.Cleanup(bad.Clean)
	if _, err := bad.Run(); err == nil || !strings.Contains(err.Error(), "go build ./testdata/no-such") {
		t.Fatalf("building a missing package: %v, want an error naming it", err)
	}
}

// TestBuildInfoRecordsSettings: the build info BuiltWithRace reads holds
// the build's settings, so a missing -race means a build without it,
// not a build info without settings.
func TestBuildInfoRecordsSettings(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build info in this test binary")
	}
	for _, s := range bi.Settings {
		if s.Key == "GOARCH" {
			return
		}
	}
	t.Errorf("build info has no GOARCH setting: %v", bi.Settings)
}

func TestProcMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("skipping: needs /proc")
	}
	rss, hwm := ProcMemory(t, os.Getpid(), "VmRSS"), ProcMemory(t, os.Getpid(), "VmHWM")
	if rss <= 0 || hwm < rss {
		t.Errorf("VmRSS %d, VmHWM %d bytes; want 0 < VmRSS <= VmHWM", rss, hwm)
	}
}
