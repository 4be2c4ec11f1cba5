package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
)

// runtimeStats is a Go child's own view of its memory, sent on "stats".
type runtimeStats struct {
	HeapInuse  uint64 `json:"heap_inuse"`
	StackInuse uint64 `json:"stack_inuse"`
	Goroutines int    `json:"goroutines"`
	// OtherSys is the runtime's memory off the heap that is not stacks,
	// GC metadata or spans: mostly the netpoller's pollDescs, one per
	// socket, which the runtime reuses but never frees.
	OtherSys uint64 `json:"other_sys"`
}

// runRole runs this binary as one of the harness's child processes: the
// sink, or a Go proxy in front of upstreams. It prints "ready ADDR..." and
// then answers commands on stdin, one a line, until stdin closes, which is
// also how the harness stops it.
func runRole(role string, upstreams []string) error {
	var ready []string
	switch role {
	case "sink":
		s, err := startSink()
		if err != nil {
			return fmt.Errorf("sink: %w", err)
		}
		defer s.close()
		ready = append(s.bulkAddrs(), s.echoAddrs()...)
	case "floor":
		f, err := serveFloor(upstreams)
		if err != nil {
			return err
		}
		defer f.stop()
		ready = []string{f.addr()}
	case "naive":
		if len(upstreams) == 0 {
			return fmt.Errorf("%s: no upstreams", role)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("%s: %w", role, err)
		}
		defer ln.Close()
		go serveNaive(ln, upstreams)
		ready = []string{ln.Addr().String()}
	case "pinproxy", "pinproxy-nolog":
		if len(upstreams) == 0 {
			return fmt.Errorf("%s: no upstreams", role)
		}
		ln, stop, err := servePinproxy("127.0.0.1:0", upstreams, role == "pinproxy", os.Stderr)
		if err != nil {
			return err
		}
		defer stop()
		defer ln.Close()
		ready = []string{ln.Addr().String()}
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	fmt.Println("ready", strings.Join(ready, " "))

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "stats":
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b, _ := json.Marshal(runtimeStats{ms.HeapInuse, ms.StackInuse, runtime.NumGoroutine(), ms.OtherSys})
			fmt.Println(string(b))
		case f[0] == "gc":
			// What an idle proxy reaches by itself within minutes: the
			// runtime forces a GC every 2 minutes (shrinking idle
			// goroutines' stacks), and the scavenger returns freed pages.
			runtime.GC()
			runtime.GC()
			debug.FreeOSMemory()
			reply(nil)
		case f[0] == "cpuprofile" && len(f) == 2:
			reply(startProfile(f[1]))
		case f[0] == "stopprofile":
			pprof.StopCPUProfile()
			reply(nil)
		default:
			reply(fmt.Errorf("unknown command %q", in.Text()))
		}
	}
	return nil
}

func startProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	return nil // the file stays open until the process ends; the profile is flushed on stop
}

func reply(err error) {
	if err != nil {
		fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	fmt.Println("ok")
}
