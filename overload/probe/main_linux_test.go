package probe

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// helperEnv names the environment variable that turns the test binary
// into a helper process (see TestMain).
const helperEnv = "NK_PROBE_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		goleak.VerifyTestMain(m)
	case "hold":
		os.Exit(holdConnections())
	case "nocap":
		os.Exit(readWithoutCap())
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", helperEnv, os.Getenv(helperEnv))
		os.Exit(2)
	}
}

var netnsSeq atomic.Int64

// newNetNS makes a fresh network namespace with loopback up, deleted when
// t ends, and returns its name and path.
func newNetNS(t testing.TB) (name, path string) {
	t.Helper()
	name = fmt.Sprintf("nk-probe-%d-%d", os.Getpid(), netnsSeq.Add(1))
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name, filepath.Join("/var/run/netns", name)
}

// run runs a command and fails t if it fails.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitUp waits until the links devs in namespace ns are operationally up
// (the kernel sets that a moment after `ip link set up`).
func waitUp(t testing.TB, ns string, devs ...string) {
	t.Helper()
	waitState(t, ns, true, devs...)
}

// waitDown waits until the links in namespace ns are no longer
// operationally up.
func waitDown(t testing.TB, ns string, devs ...string) {
	t.Helper()
	waitState(t, ns, false, devs...)
}

func waitState(t testing.TB, ns string, up bool, devs ...string) {
	t.Helper()
	for _, dev := range devs {
		testkit.WaitFor(t, fmt.Sprintf("link %s in %s to be up=%v", dev, ns, up), func() bool {
			return strings.Contains(run(t, "ip", "-n", ns, "-o", "link", "show", "dev", dev), "state UP") == up
		})
	}
}

// trackConnections loads an nftables rule with a `ct state` match into
// the namespace named ns, so that its connections go into the conntrack
// table (the kernel tracks none while no rule asks for it).
func trackConnections(t testing.TB, ns string) {
	t.Helper()
	const rules = `table inet nkprobe {
	chain out {
		type filter hook output priority 0;
		ct state new accept
	}
}
`
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f in %s: %v: %s", ns, err, out)
	}
}

// inNS runs fn on an OS thread inside the network namespace at path.
// Sockets fn opens belong to that namespace and may be used from any
// goroutine afterwards. The thread is thrown away when fn returns.
func inNS(t testing.TB, path string, fn func() error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// sink is a TCP listener that accepts and reads everything, closed when t
// ends.
type sink struct {
	ln    net.Listener
	got   atomic.Int64 // bytes received
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newSink(t testing.TB, nsPath, addr string) *sink {
	t.Helper()
	s := &sink{}
	inNS(t, nsPath, func() (err error) {
		s.ln, err = net.Listen("tcp", addr)
		return err
	})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					s.got.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		s.ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// waitBytes waits until s has received n bytes.
func (s *sink) waitBytes(t testing.TB, n int64) {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("the sink to receive %d bytes", n), func() bool { return s.got.Load() >= n })
}

// dialN opens n TCP connections to addr from inside the namespace at
// nsPath, closed when t ends.
func dialN(t testing.TB, nsPath, addr string, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	inNS(t, nsPath, func() error {
		for i := 0; i < n; i++ {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return fmt.Errorf("dial %s (%d of %d): %w", addr, i+1, n, err)
			}
			conns = append(conns, c)
		}
		return nil
	})
	return conns
}

// listenInNS opens a TCP listener on 127.0.0.1 in the namespace at
// nsPath with the given backlog, never accepting, closed when t ends, and
// returns its port.
func listenInNS(t testing.TB, nsPath string, backlog int) int {
	t.Helper()
	var port int
	inNS(t, nsPath, func() error {
		ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		t.Cleanup(func() { unix.Close(ln) })
		if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err := unix.Listen(ln, backlog); err != nil {
			return err
		}
		sa, err := unix.Getsockname(ln)
		if err != nil {
			return err
		}
		port = sa.(*unix.SockaddrInet4).Port
		return nil
	})
	return port
}

// connectInNS starts n non-blocking connects to 127.0.0.1:port from the
// namespace at nsPath, their sockets closed when t ends. It returns the
// first connect that failed outright (not merely in progress).
func connectInNS(t testing.TB, nsPath string, port, n int) error {
	t.Helper()
	var first error
	inNS(t, nsPath, func() error {
		for i := 0; i < n; i++ {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			t.Cleanup(func() { unix.Close(fd) })
			err = unix.Connect(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port})
			if err != nil && err != unix.EINPROGRESS && first == nil {
				first = fmt.Errorf("connect %d: %w", i, err)
			}
		}
		return nil
	})
	return first
}

// notesWith returns the notes that contain sub.
func notesWith(notes []string, sub string) []string {
	var out []string
	for _, n := range notes {
		if strings.Contains(n, sub) {
			out = append(out, n)
		}
	}
	return out
}
