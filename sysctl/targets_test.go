package sysctl

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-golden +got); if the change is meant, run go test -update:\n%s", name, diff)
	}
}

// goldenMachines are the memory sizes of the golden table, each with a
// CPU count such a machine has.
var goldenMachines = []struct {
	gib  uint64
	cpus int
}{{1, 1}, {2, 1}, {4, 2}, {8, 4}, {16, 8}, {64, 16}, {256, 64}}

func TestTargetsGolden(t *testing.T) {
	var b strings.Builder
	for _, m := range goldenMachines {
		fmt.Fprintf(&b, "# %d GiB, %d CPU\n", m.gib, m.cpus)
		for _, tg := range Targets(m.gib<<30, m.cpus) {
			fmt.Fprintf(&b, "%s = %s\n", tg.Key, tg.Value)
		}
		b.WriteByte('\n')
	}
	golden(t, "targets.golden", []byte(b.String()))
}

func TestTargetsShape(t *testing.T) {
	tg := Targets(4<<30, 2)
	keys := []string{KeyConntrackMax, KeyConntrackBuckets, KeySomaxconn, KeyTCPMaxSynBacklog,
		KeyNetdevMaxBacklog, KeyRmemMax, KeyWmemMax, KeyTCPRmem, KeyTCPWmem}
	if len(tg) != len(keys) {
		t.Fatalf("%d targets, want %d", len(tg), len(keys))
	}
	for i, k := range keys {
		if tg[i].Key != k || tg[i].Why == "" {
			t.Errorf("target %d: %+v, want key %s with a reason", i, tg[i], k)
		}
		fields, set, err := parseTarget(tg[i].Value)
		if err != nil || len(fields) != specOf(k).fields {
			t.Errorf("%s: value %q does not fit %d fields: %v", k, tg[i].Value, specOf(k).fields, err)
		}
		// Only the last field of a multi-value key is sized.
		for j := range set {
			if set[j] != (j == len(set)-1) {
				t.Errorf("%s: field %d sized = %v", k, j+1, set[j])
			}
		}
	}
}

// The anchors the comments cite.
func TestTargetsAnchors(t *testing.T) {
	tests := []struct {
		name      string
		got, want uint64
	}{
		{"kube-proxy floor at 1 GiB", conntrackMax(1<<30, 1), 131072},
		{"kube-proxy per core wins at 2 GiB, 8 CPUs", conntrackMax(2<<30, 8), 262144},
		{"5 % cap wins at 1 GiB, 64 CPUs", conntrackMax(1<<30, 64), 151552},
		{"the kernel's 262144 at 4 GiB", conntrackMax(4<<30, 2), 262144},
		{"65536 per GiB at 16 GiB", conntrackMax(16<<30, 8), 1 << 20},
		{"one bucket per entry", conntrackBuckets(16<<30, 8), 1 << 20},
		{"somaxconn floor is the kernel default", somaxconn(512 << 20), 4096},
		{"somaxconn cap", somaxconn(1 << 40), 65535},
		{"netdev at 1 GiB a core", netdevMaxBacklog(4<<30, 4), 5120},
		{"netdev never below the kernel's 1000", netdevMaxBacklog(1<<30, 64), 1000},
		{"16 MiB buffers at 4 GiB", socketBufferMax(4 << 30), 16 << 20},
		{"64 MiB buffer cap", socketBufferMax(1 << 40), 64 << 20},
		{"4 MiB buffer floor", socketBufferMax(256 << 20), 4 << 20},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}

// Whatever the machine, each target keeps what it sizes to a bounded
// share of memory (or to the kernel's default, which raise-only leaves
// alone), and more memory never means a smaller target.
func TestTargetsBounded(t *testing.T) {
	// 32 TiB (servers of 24 and 48 TiB are sold) asked for 2^31 entries.
	if ct := conntrackMax(32<<40, 64); ct > math.MaxInt32 {
		t.Fatalf("conntrack target %d at 32 TiB: above the kernel's int", ct)
	}
	// 4 TiB asked for a hash table of 2 GiB, which the kernel refuses.
	if b := conntrackBuckets(4<<40, 64); b*8 > math.MaxInt32 {
		t.Fatalf("conntrack buckets %d at 4 TiB: a table above INT_MAX bytes", b)
	}
	rapid.Check(t, func(t *rapid.T) {
		mem := rapid.Uint64Range(64<<20, 1<<50).Draw(t, "mem")
		cpus := rapid.IntRange(1, 1024).Draw(t, "cpus")

		ct, buckets := conntrackMax(mem, cpus), conntrackBuckets(mem, cpus)
		// Both are ints in the kernel: a larger value is refused (EINVAL),
		// and the file would hold one sysctl --system cannot set.
		if ct > math.MaxInt32 || buckets > math.MaxInt32 {
			t.Fatalf("conntrack %d entries, %d buckets for %d B: above the kernel's int", ct, buckets, mem)
		}
		if ct*conntrackEntryBytes > mem/20 {
			t.Fatalf("conntrack %d entries × %d B = %d B, above 5 %% of %d B", ct, conntrackEntryBytes, ct*conntrackEntryBytes, mem)
		}
		if buckets != min(max(ct, 1024), maxBuckets) || buckets*8 > math.MaxInt32 {
			t.Fatalf("buckets %d for max %d", buckets, ct)
		}
		if sb := somaxconn(mem); sb > 65535 || sb < 4096 || (sb > 4096 && sb*4096 > mem/64) {
			t.Fatalf("somaxconn %d: a full accept queue at 4 KiB a slot is above 1/64 of %d B", sb, mem)
		}
		if nb := netdevMaxBacklog(mem, cpus); nb > netdevBacklogKernel && nb*uint64(cpus)*netdevPacketBytes > mem/50 {
			t.Fatalf("netdev_max_backlog %d × %d CPUs × 4 KiB above 2 %% of %d B", nb, cpus, mem)
		}
		if buf := socketBufferMax(mem); buf > 64<<20 || buf < 4<<20 || (buf > 4<<20 && buf > mem/256) {
			t.Fatalf("socket buffer max %d for %d B", buf, mem)
		}

		more := mem + rapid.Uint64Range(0, 1<<40).Draw(t, "more")
		a, b := Targets(mem, cpus), Targets(more, cpus)
		for i := range a {
			x, _, _ := parseTarget(a[i].Value)
			y, _, _ := parseTarget(b[i].Value)
			if x[len(x)-1] > y[len(y)-1] {
				t.Fatalf("%s: %s at %d B but %s at %d B", a[i].Key, a[i].Value, mem, b[i].Value, more)
			}
		}
	})
}
