package agenttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteNode(t *testing.T) {
	dir := t.TempDir()
	if err := WriteNode(dir, Node{MemTotalKiB: 1000, MemoryUsedPercent: 95, ConntrackCount: 7}); err != nil {
		t.Fatal(err)
	}
	// Rewriting keeps the thread-self link and replaces the values.
	if err := WriteNode(dir, Node{MemTotalKiB: 1000, MemoryUsedPercent: 40, ConntrackCount: 8}); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{"meminfo", "MemAvailable:   600 kB"},
		{"sys/net/netfilter/nf_conntrack_count", "8\n"},
		{"sys/net/netfilter/nf_conntrack_max", "262144\n"},
		{"thread-self/net/netstat", "TcpExt: 0 0 0"},
	}
	for _, tt := range tests {
		b, err := os.ReadFile(filepath.Join(Proc(dir), tt.path))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tt.want) {
			t.Errorf("%s = %q, want it to hold %q", tt.path, b, tt.want)
		}
	}
	if err := WriteNode(dir, Node{MemoryUsedPercent: 101}); err == nil {
		t.Error("memory used 101 % accepted")
	}
}

func TestSysctlRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSysctl(dir, KernelDefaults()); err != nil {
		t.Fatal(err)
	}
	for k, want := range KernelDefaults() {
		got, err := ReadSysctl(dir, k)
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", k, got, err, want)
		}
	}
}

func TestFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := WriteNode(dir, Node{}); err != nil {
		t.Fatal(err)
	}
	path, err := FIFO(dir, "meminfo")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("%s: %v, %v; want a named pipe", path, fi, err)
	}
	// WriteNode puts the regular file back.
	if err := WriteNode(dir, Node{MemoryUsedPercent: 10}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("%s after WriteNode: %v, %v; want a regular file", path, fi, err)
	}
}
