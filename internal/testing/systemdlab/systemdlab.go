//go:build linux

package systemdlab

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/internal/testing/dockerlab"
	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// Suite is the Debian release the root filesystem is built from.
const Suite = "bookworm"

// packages are installed on top of minbase.
var packages = []string{"systemd", "systemd-sysv", "adduser", "procps"}

// masked are units that would reach past the container (the kernel's
// settings, modules, the clock, consoles) or wait for hardware.
var masked = []string{
	"systemd-sysctl.service", "systemd-modules-load.service", "systemd-binfmt.service",
	"systemd-timesyncd.service", "getty.target", "console-getty.service",
	"systemd-udevd.service", "systemd-udev-trigger.service", "systemd-networkd-wait-online.service",
}

// Rootfs returns the path of the root filesystem's tarball, building it
// with mmdebstrap unless the cache holds it. It skips t without
// mmdebstrap or root, and when the build fails (no mirror).
func Rootfs(t testing.TB) string {
	t.Helper()
	testkit.NeedRoot(t, "mmdebstrap")
	key := sha256.Sum256([]byte(Suite + " " + strings.Join(packages, ",") + " " + strings.Join(masked, ",")))
	name := fmt.Sprintf("debian-%s-systemd-%s.tar", Suite, hex.EncodeToString(key[:6]))
	dir := os.Getenv("NODEKIT_ROOTFS_CACHE")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	tmp := strings.TrimSuffix(path, ".tar") + ".tmp" + strconv.Itoa(os.Getpid()) + ".tar"
	defer os.RemoveAll(tmp)
	start := time.Now()
	args := []string{"--variant=minbase", "--format=tar", "--include=" + strings.Join(packages, ","),
		"--customize-hook=chroot \"$1\" systemctl mask " + strings.Join(masked, " "),
		Suite, tmp}
	cmd := exec.Command("mmdebstrap", args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("skipping: mmdebstrap %s could not build the root filesystem: %v: %s", Suite, err, lastLines(string(out), 3))
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	t.Logf("mmdebstrap built %s in %v", name, time.Since(start).Round(time.Second))
	return path
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// A Machine is a running container with systemd as PID 1.
type Machine struct {
	d   *dockerlab.Daemon
	ID  string
	Pid int // of its systemd, in the test's PID namespace
}

// Boot imports the root filesystem into d, starts it with systemd as PID
// 1 and waits until the system has finished starting. The container is
// removed at the end of the test.
func Boot(t testing.TB, d *dockerlab.Daemon) *Machine {
	t.Helper()
	rootfs := Rootfs(t)
	image := fmt.Sprintf("nk-systemd:%d", os.Getpid())
	start := time.Now()
	d.Run("import", "--change", `CMD ["/sbin/init"]`, rootfs, image)
	t.Cleanup(func() { d.Try("rmi", "-f", image) })
	name := fmt.Sprintf("nk-systemd-%d-%d", os.Getpid(), time.Now().UnixNano())
	// Not --privileged: /proc/sys stays read-only, so nothing inside
	// changes the host's kernel settings. systemd needs to mount (its
	// units' sandboxing) and to write its cgroups; the agent's unit
	// grants CAP_NET_ADMIN, which the container must hold.
	d.Run("run", "-d", "--name", name,
		"--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--cap-add", "SYS_PTRACE",
		"--cap-add", "DAC_READ_SEARCH", "--cap-add", "IPC_LOCK", "--cap-add", "SYS_NICE",
		"--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
		"--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
		"--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
		"--network", "none", "--stop-signal", "SIGRTMIN+3", image)
	m := &Machine{d: d, ID: name}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := m.Exec("journalctl", "--no-pager", "-n", "200")
			t.Logf("the container's journal, last 200 lines:\n%s", out)
		}
		d.Try("rm", "-f", name)
	})
	pid, err := strconv.Atoi(strings.TrimSpace(d.Run("inspect", "-f", "{{.State.Pid}}", name)))
	if err != nil {
		t.Fatal(err)
	}
	m.Pid = pid
	var state string
	testkit.WaitForWithin(t, 2*time.Minute, "systemd in the container to finish starting", func() bool {
		state, _ = m.Exec("systemctl", "is-system-running")
		state = strings.TrimSpace(state)
		return state == "running" || state == "degraded"
	})
	if state == "degraded" {
		failed, _ := m.Exec("systemctl", "--failed", "--no-legend")
		t.Logf("the container's systemd runs degraded; failed units:\n%s", failed)
	}
	t.Logf("booted %s (systemd as PID 1) in %v", Suite, time.Since(start).Round(100*time.Millisecond))
	return m
}

// Exec runs args in the machine (docker exec) and returns its combined
// output.
func (m *Machine) Exec(args ...string) (string, error) {
	return m.d.Try(append([]string{"exec", m.ID}, args...)...)
}

// Run runs args in the machine and returns its output, failing t unless
// it exits 0.
func (m *Machine) Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := m.Exec(args...)
	if err != nil {
		t.Fatalf("in the container: %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// Copy copies the host's file src to dst in the machine.
func (m *Machine) Copy(t testing.TB, src, dst string) {
	t.Helper()
	m.d.Run("cp", src, m.ID+":"+dst)
}

// WriteFile writes data to the machine's file path with mode perm.
func (m *Machine) WriteFile(t testing.TB, path string, data []byte, perm os.FileMode) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(tmp, data, perm); err != nil {
		t.Fatal(err)
	}
	m.Run(t, "mkdir", "-p", filepath.Dir(path))
	m.Copy(t, tmp, path+".new")
	m.Run(t, "chmod", fmt.Sprintf("%o", perm), path+".new")
	m.Run(t, "chown", "root:root", path+".new")
	m.Run(t, "mv", path+".new", path)
}

// Show returns a unit's property, as systemctl show -p NAME --value
// prints it.
func (m *Machine) Show(t testing.TB, unit, property string) string {
	t.Helper()
	return strings.TrimSpace(m.Run(t, "systemctl", "show", "-p", property, "--value", unit))
}

var netnsMu sync.Mutex

// InNetns runs f on an OS thread moved into the machine's network
// namespace: the sockets f opens (a listener, a dial) are the machine's,
// and stay so when used from other goroutines afterwards.
func (m *Machine) InNetns(t testing.TB, f func() error) error {
	t.Helper()
	netnsMu.Lock()
	defer netnsMu.Unlock()
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", m.Pid))
	if err != nil {
		return err
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer home.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns into the container's network namespace: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked and ends with the goroutine.
			errc <- fmt.Errorf("setns back: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
