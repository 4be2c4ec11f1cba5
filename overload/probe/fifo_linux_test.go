package probe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/agent/agenttest"
	"github.com/proofkit/nodekit/internal/procfile"
	"github.com/proofkit/nodekit/overload"
)

// TestReadRefusesFIFO: a named pipe in a -proc or -sys tree (opening one
// for reading blocks until a writer comes) never hangs Read: the file is
// refused with an error naming its path, its input is missing, and Read
// returns well within its context's deadline.
func TestReadRefusesFIFO(t *testing.T) {
	tests := []struct {
		rel     string // under the tree's proc/
		missing overload.Input
	}{
		{"meminfo", overload.InputMemory},
		{"loadavg", overload.InputLoad},
		{"sys/net/netfilter/nf_conntrack_count", overload.InputConntrack},
		{"sys/net/netfilter/nf_conntrack_max", overload.InputConntrack},
		{"1/task/1/net/netstat", overload.InputListenDrops},
		{"sys/kernel/random/boot_id", ""}, // the kernel's identity: unknown, no input lost
	}
	for _, tt := range tests {
		t.Run(tt.rel, func(t *testing.T) {
			dir := t.TempDir()
			if err := agenttest.WriteNode(dir, agenttest.Node{MemoryUsedPercent: 40}); err != nil {
				t.Fatal(err)
			}
			path, err := agenttest.FIFO(dir, tt.rel)
			if err != nil {
				t.Fatal(err)
			}
			p := newProbe(t, Config{ProcRoot: agenttest.Proc(dir), SysRoot: agenttest.Sys(dir)})
			const deadline = 5 * time.Second
			for i := range 2 { // the first reading and one with deltas
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				r, err := p.Read(ctx)
				took := time.Since(start)
				cancel()
				if err != nil {
					t.Fatalf("reading %d: %v", i, err)
				}
				if took > deadline/2 {
					t.Fatalf("reading %d took %v with a %v deadline", i, took, deadline)
				}
				if tt.missing != "" && !slices.Contains(r.Missing, tt.missing) {
					t.Errorf("reading %d: %s not missing: %v (notes %q)", i, tt.missing, r.Missing, r.Notes)
				}
				if tt.missing != "" && len(notesWith(r.Notes, path+" is a named pipe (FIFO), not a regular file")) == 0 {
					t.Errorf("reading %d: notes %q do not name %s as a named pipe", i, r.Notes, path)
				}
			}
		})
	}

	t.Run("link speed", func(t *testing.T) {
		dir := t.TempDir()
		sys := filepath.Join(dir, "sys")
		if err := os.MkdirAll(filepath.Join(sys, "class", "net", "eth0"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(sys, "class", "net", "eth0", "ifindex"), "2\n")
		fifo := filepath.Join(sys, "class", "net", "eth0", "speed")
		if err := mkfifo(fifo); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		v, why := linkSpeed(ctx, sys, linkSample{name: "eth0", index: 2})
		if v != 0 || len(notesWith([]string{why}, fifo+" is a named pipe")) == 0 {
			t.Fatalf("linkSpeed of a FIFO = %d, %q; want 0 and the path named", v, why)
		}
	})

	t.Run("both procfs inputs", func(t *testing.T) {
		dir := t.TempDir()
		if err := agenttest.WriteNode(dir, agenttest.Node{}); err != nil {
			t.Fatal(err)
		}
		for _, rel := range []string{"meminfo", "loadavg"} {
			if _, err := agenttest.FIFO(dir, rel); err != nil {
				t.Fatal(err)
			}
		}
		p := newProbe(t, Config{ProcRoot: agenttest.Proc(dir)})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := p.Read(ctx); !errors.Is(err, procfile.ErrNotRegular) {
			t.Fatalf("Read with meminfo and loadavg FIFOs = %v, want procfile.ErrNotRegular", err)
		}
	})
}

// TestReadFileTooLarge: a file over maxFileSize is malformed to the
// probe. (procfile's tests cover FIFOs, devices and cancelled contexts.)
func TestReadFileTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, make([]byte, maxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readFile(context.Background(), path); !errors.Is(err, errMalformed) || !errors.Is(err, procfile.ErrTooLarge) {
		t.Errorf("readFile of %d bytes = %v, want errMalformed", maxFileSize+1, err)
	}
	if _, err := readFile(context.Background(), filepath.Join(t.TempDir(), "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("readFile of a missing file = %v, want os.ErrNotExist", err)
	}
}

func mkfifo(path string) error { return unix.Mkfifo(path, 0o644) }
