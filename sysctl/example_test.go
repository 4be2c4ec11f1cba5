package sysctl_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/proofkit/nodekit/sysctl"
)

// The targets of a 4 GiB, 2-CPU node. A multi-value key's fields that
// are not sized read "-": they stay as found.
func ExampleTargets() {
	for _, t := range sysctl.Targets(4<<30, 2) {
		fmt.Printf("%s = %s\n", t.Key, t.Value)
	}
	// Output:
	// net.netfilter.nf_conntrack_max = 262144
	// net.netfilter.nf_conntrack_buckets = 262144
	// net.core.somaxconn = 16384
	// net.ipv4.tcp_max_syn_backlog = 16384
	// net.core.netdev_max_backlog = 10240
	// net.core.rmem_max = 16777216
	// net.core.wmem_max = 16777216
	// net.ipv4.tcp_rmem = - - 16777216
	// net.ipv4.tcp_wmem = - - 16777216
}

func ExampleKeyResult_String() {
	k := sysctl.KeyResult{
		Key:    sysctl.KeyConntrackMax,
		Found:  "262144",
		Target: "1048576",
		Action: sysctl.CannotWrite,
		Reason: "host-only key: read-only inside a network namespace (mode 0444)",
	}
	fmt.Println(k)
	// Output:
	// net.netfilter.nf_conntrack_max: found 262144, target 1048576: cannot write (host-only key: read-only inside a network namespace (mode 0444))
}

// The agent's "write the file only" mode: Plan, then WriteFile of what
// needs raising. Keys already high enough are left out.
func ExampleWriteFile() {
	dir, err := os.MkdirTemp("", "config")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	keys := []sysctl.KeyResult{
		{Key: sysctl.KeySomaxconn, Found: "4096", Target: "65535", Action: sysctl.WouldRaise},
		{Key: sysctl.KeyTCPRmem, Found: "4096 131072 6291456", Target: "4096 131072 67108864", Action: sysctl.WouldRaise},
		{Key: sysctl.KeyRmemMax, Found: "134217728", Target: "67108864", Action: sysctl.AlreadyHigher},
	}
	path, err := sysctl.WriteFile(dir, keys)
	if err != nil {
		panic(err)
	}
	b, _ := os.ReadFile(path)
	fmt.Println(filepath.Base(path))
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "#") && strings.TrimSpace(line) != "" {
			fmt.Print(line)
		}
	}
	// Output:
	// 99-proofkit-sysctl.conf
	// net.core.somaxconn = 65535
	// net.ipv4.tcp_rmem = 4096 131072 67108864
}
