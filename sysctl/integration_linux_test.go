package sysctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// The privileged tests re-execute this test binary as a child inside a
// private mount namespace or a fresh network namespace; these variables
// tell the child what to do. Nothing outside the tests reads them.
const (
	childEnv    = "NODEKIT_SYSCTL_TEST_CHILD" // "readonly" or "netns"
	childDirEnv = "NODEKIT_SYSCTL_TEST_DIR"   // Config.Dir for the child
	childNSEnv  = "NODEKIT_SYSCTL_TEST_NS"    // the parent's namespace link
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// childOut is what a child reports on stdout.
type childOut struct {
	Plan, Apply Report
	After       map[string]string // each key's value after Apply, as seen there
}

// child runs Plan and Apply on the live /proc/sys, after making sure it
// is where the test put it: it never runs on the host's writable
// /proc/sys.
func child(mode string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "child: "+format+"\n", a...)
		return 2
	}
	switch mode {
	case "readonly":
		// The parent started us with CLONE_NEWNS; Go then made every
		// mount private, so nothing below reaches the host.
		if ns, _ := os.Readlink("/proc/self/ns/mnt"); ns == "" || ns == os.Getenv(childNSEnv) {
			return fail("not in a mount namespace of its own (%q)", ns)
		}
		// mount -o bind,ro /proc/sys /proc/sys, as Docker gives it.
		if err := unix.Mount("/proc/sys", "/proc/sys", "", unix.MS_BIND, ""); err != nil {
			return fail("bind mount: %v", err)
		}
		if err := unix.Mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fail("read-only remount: %v", err)
		}
		var st unix.Statfs_t
		if err := unix.Statfs("/proc/sys", &st); err != nil || st.Flags&unix.ST_RDONLY == 0 {
			return fail("/proc/sys is not read-only (flags %#x, %v)", st.Flags, err)
		}
	case "netns":
		if ns, _ := os.Readlink("/proc/self/ns/net"); ns == "" || ns == os.Getenv(childNSEnv) {
			return fail("not in a network namespace of its own (%q)", ns)
		}
	default:
		return fail("unknown mode %q", mode)
	}
	cfg := Config{Dir: os.Getenv(childDirEnv)}
	var out childOut
	var err error
	if out.Plan, err = Plan(cfg); err != nil {
		return fail("plan: %v", err)
	}
	if out.Apply, err = Apply(cfg); err != nil {
		return fail("apply: %v", err)
	}
	out.After = liveValues()
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return fail("%v", err)
	}
	return 0
}

// liveValues reads every key of this package from /proc/sys ("" when
// absent).
func liveValues() map[string]string {
	m := map[string]string{}
	for _, tg := range Targets(1<<30, 1) {
		b, _ := os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(tg.Key, ".", "/")))
		m[tg.Key] = oneLine(string(b))
	}
	return m
}

// selfAndNS returns this test binary, for runChild, and the link of this
// process's namespace of the kind ("mnt", "net"), by which the child
// checks that it runs in a namespace of its own.
func selfAndNS(t *testing.T, kind string) (exe, ns string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if ns, err = os.Readlink("/proc/self/ns/" + kind); err != nil {
		t.Fatal(err)
	}
	return exe, ns
}

// runChild starts this test binary as a child and decodes its report.
func runChild(t *testing.T, cmd *exec.Cmd, mode, dir, ns string) childOut {
	t.Helper()
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childDirEnv+"="+dir, childNSEnv+"="+ns)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %s: %v\n%s", mode, err, stderr.String())
	}
	var out childOut
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatalf("child %s output %q: %v", mode, stdout, err)
	}
	if len(out.Apply.Keys) != 9 || len(out.Plan.Keys) != 9 {
		t.Fatalf("child %s reported %d and %d keys, want 9", mode, len(out.Plan.Keys), len(out.Apply.Keys))
	}
	return out
}

// needsRaise says, from a result's own figures, whether the value found
// is below the target in any field.
func needsRaise(t *testing.T, k KeyResult) bool {
	t.Helper()
	tv, set, err := parseTarget(k.Target)
	if err != nil {
		t.Fatalf("%s: target %q: %v", k.Key, k.Target, err)
	}
	found, err := parseValue(k.Found, len(tv))
	if err != nil {
		return k.Found == "" && k.Action == CannotWrite // hidden host-only key
	}
	for i := range found {
		if set[i] && found[i] < tv[i] {
			return true
		}
	}
	return false
}

// checkFile checks that the child's fallback file sets exactly the keys
// it could not write, each at its target.
func checkFile(t *testing.T, rep Report, dir string) {
	t.Helper()
	var want []string
	for _, k := range rep.Keys {
		if k.Action == CannotWrite {
			want = append(want, k.Key+" = "+k.Target)
		}
	}
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if len(want) == 0 {
		if err == nil || rep.File != "" {
			t.Errorf("%s written with nothing to set: %q", path, b)
		}
		return
	}
	if err != nil {
		t.Fatalf("no fallback file for %v: %v", want, err)
	}
	if rep.File != path {
		t.Errorf("report names file %q, want %q", rep.File, path)
	}
	if got := fileKeys(t, string(b)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("file sets\n%s\nwant exactly the keys that could not be written:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(string(b), "sudo sysctl --system") {
		t.Errorf("file header lacks the install steps:\n%s", b)
	}
}

// checkHostUntouched fails when a host value moved to the child's target.
// Other tests on this machine may change host values meanwhile (and
// restore them), so a change to some other value is not ours.
func checkHostUntouched(t *testing.T, before, after map[string]string, rep Report) {
	t.Helper()
	for _, k := range rep.Keys {
		if after[k.Key] != before[k.Key] && after[k.Key] == k.Target {
			t.Errorf("host %s changed from %q to the target %q", k.Key, before[k.Key], after[k.Key])
		}
	}
}

// TestIntegrationReadOnlyProcSys runs Apply where /proc/sys is a
// read-only bind mount, as in a Docker container: every key that needs a
// raise must land in the file, and nothing on the host changes.
func TestIntegrationReadOnlyProcSys(t *testing.T) {
	testkit.NeedRoot(t)
	exe, mntNS := selfAndNS(t, "mnt")
	before := liveValues()
	hostPlan, err := Plan(Config{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(exe)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out := runChild(t, cmd, "readonly", dir, mntNS)
	after := liveValues()

	raised := 0
	for i, k := range out.Apply.Keys {
		p := out.Plan.Keys[i]
		t.Logf("%v", k)
		switch {
		case k.Action == Raised || k.Action == WouldRaise:
			t.Errorf("%s: %s on a read-only /proc/sys", k.Key, k.Action)
		case needsRaise(t, k):
			raised++
			if k.Action != CannotWrite || !strings.Contains(k.Reason, "EROFS") {
				t.Errorf("%v: want %q with EROFS", k, CannotWrite)
			}
			if p.Action != CannotWrite || !strings.Contains(p.Reason, "EROFS") {
				t.Errorf("plan %v: want %q with EROFS: Plan must see the read-only mount", p, CannotWrite)
			}
		case k.Action == CannotWrite:
			t.Errorf("%v: cannot write, but the value needs no raise", k)
		}
		// The host's own Plan agrees on what needs raising, when
		// nothing moved in between.
		if h := hostPlan.Keys[i]; h.Found == k.Found && (h.Action == WouldRaise) != (k.Action == CannotWrite) {
			t.Errorf("host plan %v, read-only run %v", h, k)
		}
	}
	t.Logf("%d keys needed a raise on this host", raised)
	checkFile(t, out.Apply, dir)
	checkHostUntouched(t, before, after, out.Apply)
	for key, v := range out.After {
		if before[key] != v && after[key] == before[key] {
			t.Errorf("%s read %q inside the read-only mount, %q on the host", key, v, before[key])
		}
	}
}

var netnsSeq atomic.Int32

// TestIntegrationNetns runs Apply in a fresh network namespace: host-only
// keys are reported as such and go into the file; per-namespace keys are
// raised there, and only there.
func TestIntegrationNetns(t *testing.T) {
	testkit.NeedRoot(t, "ip")
	exe, netNS := selfAndNS(t, "net")
	name := fmt.Sprintf("nk-sysctl-%d-%d", os.Getpid(), netnsSeq.Add(1))
	if b, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, b)
	}
	t.Cleanup(func() {
		if b, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, b)
		}
	})
	before := liveValues()
	dir := t.TempDir()
	out := runChild(t, exec.Command("ip", "netns", "exec", name, exe), "netns", dir, netNS)
	after := liveValues()

	for _, k := range out.Apply.Keys {
		t.Logf("%v", k)
		spec := specOf(k.Key)
		switch {
		case spec.hostOnly && k.Action == NotPresent && spec.module != "":
			// nf_conntrack not loaded on this host: nothing to check.
		case spec.hostOnly && needsRaise(t, k):
			if k.Action != CannotWrite || !strings.Contains(k.Reason, "host-only key") {
				t.Errorf("%v: want %q as a host-only key", k, CannotWrite)
			}
		case spec.hostOnly:
			if k.Action != AlreadyHigher {
				t.Errorf("%v: want %q", k, AlreadyHigher)
			}
		default: // per network namespace
			if k.Action != Raised && k.Action != AlreadyHigher {
				t.Errorf("%v: a per-namespace key must be raised inside the namespace", k)
			}
			if k.Action == Raised && out.After[k.Key] != k.Target {
				t.Errorf("%s holds %q in the namespace after Apply, want %q", k.Key, out.After[k.Key], k.Target)
			}
		}
	}
	// The namespace keeps what the child set: read it from outside.
	for _, k := range out.Apply.Keys {
		if k.Action != Raised {
			continue
		}
		b, err := exec.Command("ip", "netns", "exec", name, "cat", filepath.Join("/proc/sys", strings.ReplaceAll(k.Key, ".", "/"))).Output()
		if err != nil {
			t.Fatal(err)
		}
		if got := oneLine(string(b)); got != k.Target {
			t.Errorf("namespace %s holds %s = %q, want %q", name, k.Key, got, k.Target)
		}
	}
	if k := out.Apply.Keys[4]; k.Key == KeyNetdevMaxBacklog && k.Found == "" &&
		(k.Action != CannotWrite || !strings.Contains(k.Reason, "not visible inside a network namespace")) {
		t.Errorf("%v: a hidden host-only key must be reported as such", k)
	}
	checkFile(t, out.Apply, dir)
	checkHostUntouched(t, before, after, out.Apply)
}
