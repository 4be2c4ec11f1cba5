package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	bin "encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// The upgrade tests run the built binary from an "installed" path, replace
// the file there as a package upgrade does (a new file renamed over it),
// and send SIGUSR2. Streams carry random bursts both ways, idle
// connections park, some streams are half-closed, and a dialer connects
// steadily throughout; at the end every stream's bytes are compared, by
// sha256, between the client and the upstream ends.
//
// PINPROXY_UPGRADE_LOAD=streams,idle,upgrades,gap sizes the main test:
// gap is the mean time between two bursts of a stream. The default is
// 100,400,4,100ms, to fit a CI run; the figures in docs/benchmarks.md are
// from 1000,5000,10,2s.

// upgradeLoad returns the main test's size.
func upgradeLoad(t *testing.T) (streams, idle, upgrades int, gap time.Duration) {
	streams, idle, upgrades, gap = 100, 400, 4, 100*time.Millisecond
	if v := os.Getenv("PINPROXY_UPGRADE_LOAD"); v != "" {
		var err error
		f := strings.Split(v, ",")
		if len(f) == 4 {
			streams, err = strconv.Atoi(f[0])
			if err == nil {
				idle, err = strconv.Atoi(f[1])
			}
			if err == nil {
				upgrades, err = strconv.Atoi(f[2])
			}
			if err == nil {
				gap, err = time.ParseDuration(f[3])
			}
		}
		if len(f) != 4 || err != nil || gap <= 0 {
			t.Fatalf("PINPROXY_UPGRADE_LOAD=%q: want streams,idle,upgrades,gap (e.g. 1000,5000,10,2s)", v)
		}
	}
	return
}

// buildA and buildB are the binary built as version vA and vB, and
// buildBad the stand-in for a bad release in testdata/badnew.
var (
	buildA   = testkit.Build{Pkgs: []string{"."}, Flags: []string{"-ldflags", "-X github.com/proofkit/nodekit/internal/buildinfo.version=vA"}}
	buildB   = testkit.Build{Pkgs: []string{"."}, Flags: []string{"-ldflags", "-X github.com/proofkit/nodekit/internal/buildinfo.version=vB"}}
	buildBad = testkit.Build{Pkgs: []string{"./testdata/badnew"}}
)

func init() { moreBuilds = append(moreBuilds, &buildA, &buildB, &buildBad) }

var builds struct {
	once sync.Once
	a, b string // pinproxy built as version vA and vB
	bad  string // testdata/badnew
}

// buildVariants builds the two versions of the binary and the bad
// release's stand-in once per test run.
func buildVariants(t *testing.T) {
	t.Helper()
	a, b, bad := buildA.Bin(t, "pinproxy"), buildB.Bin(t, "pinproxy"), buildBad.Bin(t, "badnew")
	builds.once.Do(func() { builds.a, builds.b, builds.bad = a, b, bad })
}

// listenInode returns the inode of the kernel socket listening at addr
// (an IPv4 host:port), from /proc/net/tcp: the same number before and
// after an upgrade is the same listen queue.
func listenInode(t *testing.T, addr string) string {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	a4 := ap.Addr().As4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a4[3], a4[2], a4[1], a4[0], ap.Port())
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) > 9 && f[1] == want && f[3] == "0A" {
			return f[9]
		}
	}
	t.Fatalf("no socket listens at %s", addr)
	return ""
}

// install puts the file src at path as a package manager does: a new file
// renamed over the old one, which a running process keeps.
func install(t *testing.T, src, path string) {
	t.Helper()
	tmp := path + ".new"
	os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tmp, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// family is a pinproxy process and the ones that take over from it, all
// writing to one log.
type family struct {
	t     *testing.T
	addr  string
	admin string

	mu    sync.Mutex
	lines []string
	grew  chan struct{}
	pids  []int // every process seen, the current one last
	eof   chan struct{}
	first *exec.Cmd
}

var handedOverRE = regexp.MustCompile(`msg="upgrade: connections handed over" conns=(\d+) parked=(\d+) pending_bytes=(\d+) listeners=\d+ paused=(\S+) took=(\S+) new_pid=(\d+)`)

// startFamily runs the binary at path with args, and waits until it
// listens.
func startFamily(t *testing.T, path string, env []string, args ...string) *family {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	f := &family{t: t, grew: make(chan struct{}), eof: make(chan struct{})}
	cmd := exec.Command(path, append([]string{"-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = w // a file, not a pipe the exec package copies: the children write to it too
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	f.first = cmd
	f.pids = []int{cmd.Process.Pid}
	go cmd.Wait()
	go func() {
		defer close(f.eof)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			f.mu.Lock()
			f.lines = append(f.lines, line)
			if m := handedOverRE.FindStringSubmatch(line); m != nil {
				pid, _ := strconv.Atoi(m[6])
				f.pids = append(f.pids, pid)
			}
			close(f.grew)
			f.grew = make(chan struct{})
			f.mu.Unlock()
		}
		r.Close()
	}()
	t.Cleanup(func() {
		f.mu.Lock()
		pids := append([]int(nil), f.pids...)
		f.mu.Unlock()
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-f.eof:
		case <-time.After(pinproxytest.WaitFor):
		}
		if t.Failed() {
			f.mu.Lock()
			lines := f.lines
			if len(lines) > 400 {
				lines = lines[len(lines)-400:]
			}
			t.Logf("pinproxy's log (last lines):\n%s", strings.Join(lines, "\n"))
			f.mu.Unlock()
		}
	})
	f.waitLines(func(lines []string) bool {
		for _, l := range lines {
			if m := addrRE.FindStringSubmatch(l); m != nil {
				if m[1] == "pinproxy" {
					f.addr = m[2]
				} else {
					f.admin = m[2]
				}
			}
		}
		return f.addr != "" && f.admin != ""
	})
	return f
}

func (f *family) waitLines(cond func([]string) bool) {
	f.t.Helper()
	deadline := time.After(pinproxytest.WaitFor)
	for {
		f.mu.Lock()
		lines, grew := f.lines, f.grew
		f.mu.Unlock()
		if cond(lines) {
			return
		}
		select {
		case <-grew:
		case <-f.eof:
			f.t.Fatal("every pinproxy process exited while the test waited for its log")
		case <-deadline:
			f.t.Fatal("pinproxy's log did not show what the test waited for")
		}
	}
}

// waitCount waits until n log lines contain s.
func (f *family) waitCount(s string, n int) {
	f.t.Helper()
	f.waitLines(func(lines []string) bool { return count(lines, s) >= n })
}

func (f *family) pid() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pids[len(f.pids)-1]
}

// gone reports whether process pid has exited (a zombie holds nothing).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")
}

// status is /status.
type status struct {
	Version   string `json:"version"`
	Upstreams []struct {
		Addr      string `json:"addr"`
		Live      int    `json:"live"`
		BytesUp   int64  `json:"bytes_sent"`
		BytesDown int64  `json:"bytes_received"`
	} `json:"upstreams"`
	Totals struct {
		Live           int   `json:"live"`
		Accepted       int64 `json:"accepted"`
		Upgrades       int64 `json:"upgrades"`
		UpgradesFailed int64 `json:"upgrades_failed"`
	} `json:"totals"`
}

func (f *family) status() status {
	f.t.Helper()
	var s status
	if err := json.Unmarshal([]byte(get(f.t, "http://"+f.admin+"/status")), &s); err != nil {
		f.t.Fatal(err)
	}
	return s
}

// Stream kinds, in the top bits of the id a client sends first.
const (
	kindStream = 0
	kindIdle   = 1 << 62 // nothing either way until the end
	kindHalf   = 2 << 62 // the client half-closes at once; the upstream streams on
	kindProbe  = 3 << 62 // the steady dialer's: the client half-closes at once, the upstream sends nothing
)

// streamLab is the upstreams and clients of an upgrade test.
type streamLab struct {
	t     *testing.T
	ups   []net.Listener
	stop  chan struct{} // closed: every stream sends its last burst and half-closes
	wg    sync.WaitGroup
	gap   time.Duration // mean time between two bursts of a stream
	seq   atomic.Uint64
	fails atomic.Int64

	mu     sync.Mutex
	ends   map[uint64]*ends
	errs   []string
	probes atomic.Int64
}

// ends are the four hashes of one stream.
type ends struct {
	clientSent, clientGot, upSent, upGot []byte
}

func newStreamLab(t *testing.T, nUpstreams int, gap time.Duration) *streamLab {
	lab := &streamLab{t: t, stop: make(chan struct{}), gap: gap, ends: make(map[uint64]*ends)}
	for range nUpstreams {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lab.ups = append(lab.ups, ln)
		go lab.serve(ln)
	}
	t.Cleanup(func() {
		for _, ln := range lab.ups {
			ln.Close()
		}
	})
	return lab
}

func (lab *streamLab) upstreams() string {
	var s []string
	for _, ln := range lab.ups {
		s = append(s, ln.Addr().String())
	}
	return strings.Join(s, ",")
}

func (lab *streamLab) fail(format string, args ...any) {
	lab.fails.Add(1)
	lab.mu.Lock()
	if len(lab.errs) < 20 {
		lab.errs = append(lab.errs, fmt.Sprintf(format, args...))
	}
	lab.mu.Unlock()
}

func (lab *streamLab) record(id uint64, set func(e *ends)) {
	lab.mu.Lock()
	e := lab.ends[id]
	if e == nil {
		e = new(ends)
		lab.ends[id] = e
	}
	set(e)
	lab.mu.Unlock()
}

func (lab *streamLab) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go lab.upstreamSide(c.(*net.TCPConn))
	}
}

// upstreamSide is an upstream's end of one stream.
func (lab *streamLab) upstreamSide(c *net.TCPConn) {
	defer c.Close()
	var idb [8]byte
	got := sha256.New()
	if _, err := io.ReadFull(c, idb[:]); err != nil {
		lab.fail("upstream: reading a stream's id: %v", err)
		return
	}
	got.Write(idb[:])
	id := bin.BigEndian.Uint64(idb[:])
	kind := id & (3 << 62)
	sent := sha256.New()
	done := make(chan struct{})
	go func() {
		defer close(done)
		switch kind {
		case kindProbe:
		case kindIdle:
			<-lab.stop
			lab.burst(c, sent, rand.New(rand.NewPCG(id, 2)), 100)
		default:
			lab.bursts(c, sent, rand.New(rand.NewPCG(id, 2)))
		}
		if err := c.CloseWrite(); err != nil {
			lab.fail("upstream %x: close write: %v", id, err)
		}
	}()
	if _, err := io.Copy(got, c); err != nil {
		lab.fail("upstream %x: reading: %v", id, err)
	}
	<-done
	if kind == kindProbe {
		return
	}
	lab.record(id, func(e *ends) { e.upSent, e.upGot = sent.Sum(nil), got.Sum(nil) })
}

// bursts writes random bursts to c until the lab stops, then one more.
func (lab *streamLab) bursts(c net.Conn, h hash.Hash, r *rand.Rand) bool {
	for {
		n := 1 + r.IntN(16<<10)
		if r.IntN(20) == 0 {
			n = 64<<10 + r.IntN(192<<10) // the pump splices the tail of a large burst
		}
		if !lab.burst(c, h, r, n) {
			return false
		}
		t := time.NewTimer(time.Duration(r.Int64N(int64(2 * lab.gap))))
		select {
		case <-lab.stop:
			t.Stop()
			return lab.burst(c, h, r, 100)
		case <-t.C:
		}
	}
}

func (lab *streamLab) burst(c net.Conn, h hash.Hash, r *rand.Rand, n int) bool {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		bin.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	h.Write(b)
	if _, err := c.Write(b); err != nil {
		lab.fail("writing a burst: %v", err)
		return false
	}
	return true
}

// dial starts a client of the given kind through the proxy at addr.
func (lab *streamLab) dial(addr string, kind uint64) error {
	id := lab.seq.Add(1) | kind
	c, err := net.DialTimeout("tcp", addr, pinproxytest.WaitFor)
	if err != nil {
		return err
	}
	tc := c.(*net.TCPConn)
	lab.wg.Add(1)
	go func() {
		defer lab.wg.Done()
		defer c.Close()
		var idb [8]byte
		bin.BigEndian.PutUint64(idb[:], id)
		sent, got := sha256.New(), sha256.New()
		sent.Write(idb[:])
		if _, err := c.Write(idb[:]); err != nil {
			lab.fail("client %x: writing its id: %v", id, err)
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			r := rand.New(rand.NewPCG(id, 1))
			switch kind {
			case kindIdle:
				<-lab.stop
				lab.burst(c, sent, r, 100)
			case kindStream:
				lab.bursts(c, sent, r)
			case kindHalf:
				lab.burst(c, sent, r, 1+r.IntN(32<<10))
			}
			if err := tc.CloseWrite(); err != nil {
				lab.fail("client %x: close write: %v", id, err)
			}
		}()
		if _, err := io.Copy(got, c); err != nil {
			lab.fail("client %x: reading: %v", id, err)
		}
		<-done
		if kind == kindProbe {
			lab.probes.Add(1)
			return
		}
		lab.record(id, func(e *ends) { e.clientSent, e.clientGot = sent.Sum(nil), got.Sum(nil) })
	}()
	return nil
}

// dialSteadily dials a probe every 5 ms (200 a second) until stop,
// counting the dials that fail.
func (lab *streamLab) dialSteadily(addr string, refused *atomic.Int64) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if err := lab.dial(addr, kindProbe); err != nil {
					refused.Add(1)
					lab.fail("steady dialer: %v", err)
				}
			}
		}
	}()
	return func() { close(quit); <-done }
}

// finish stops every stream and checks every one end to end.
func (lab *streamLab) finish(want int) {
	t := lab.t
	t.Helper()
	close(lab.stop)
	done := make(chan struct{})
	go func() { lab.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * pinproxytest.WaitFor):
		t.Fatal("streams did not end")
	}
	// The upstream ends record after their client saw EOF: wait for them.
	deadline := time.Now().Add(pinproxytest.WaitFor)
	for {
		lab.mu.Lock()
		complete := 0
		for _, e := range lab.ends {
			if e.upGot != nil && e.clientGot != nil {
				complete++
			}
		}
		lab.mu.Unlock()
		if complete >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	lab.mu.Lock()
	defer lab.mu.Unlock()
	bad := 0
	for id, e := range lab.ends {
		if !bytes.Equal(e.clientSent, e.upGot) || !bytes.Equal(e.upSent, e.clientGot) {
			if bad++; bad <= 5 {
				t.Errorf("stream %x: bytes differ end to end (client sent %x, upstream got %x; upstream sent %x, client got %x)",
					id, e.clientSent, e.upGot, e.upSent, e.clientGot)
			}
		}
	}
	if len(lab.ends) != want {
		t.Errorf("%d streams recorded, want %d", len(lab.ends), want)
	}
	if n := lab.fails.Load(); n > 0 {
		t.Errorf("%d errors (EOFs, resets, refusals); first ones:\n%s", n, strings.Join(lab.errs, "\n"))
	}
	if bad > 0 {
		t.Errorf("%d of %d streams differ", bad, len(lab.ends))
	}
}

// start dials the lab's streams and idle connections through addr.
func (lab *streamLab) start(addr string, streams, idle int) {
	lab.t.Helper()
	for i := range streams {
		kind := uint64(kindStream)
		if i%10 == 9 {
			kind = kindHalf
		}
		if err := lab.dial(addr, kind); err != nil {
			lab.t.Fatal(err)
		}
	}
	for range idle {
		if err := lab.dial(addr, kindIdle); err != nil {
			lab.t.Fatal(err)
		}
	}
}

// waitLive waits until the proxy's /status counts n live connections.
func (f *family) waitLive(n int) {
	f.t.Helper()
	deadline := time.Now().Add(pinproxytest.WaitFor)
	for {
		s := f.status()
		if s.Totals.Live >= n {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d live connections, want %d", s.Totals.Live, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// upgrade sends SIGUSR2 and waits until the old process has handed over
// and exited; it returns the hand-over's log line and how long the old
// process lived after the signal.
func (f *family) upgrade(n int) (line string, oldLived time.Duration) {
	f.t.Helper()
	old := f.pid()
	t0 := time.Now()
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		f.t.Fatal(err)
	}
	f.waitCount(`msg="upgrade: connections handed over"`, n)
	testkit.WaitForWithin(f.t, 10*time.Second, fmt.Sprintf("the old process %d to exit after SIGUSR2", old), func() bool { return gone(old) })
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.lines {
		if handedOverRE.MatchString(l) {
			line = l
		}
	}
	return line, time.Since(t0)
}

func TestBinaryUpgradeKeepsEveryConnection(t *testing.T) {
	streams, idle, upgrades, gap := upgradeLoad(t)
	buildVariants(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "pinproxy")
	install(t, builds.a, path)
	lab := newStreamLab(t, 2, gap)
	notes := notifySocket(t)
	f := startFamily(t, path, []string{"NOTIFY_SOCKET=" + notes.path}, "-upstreams", lab.upstreams(), "-rebalance-interval", "0",
		"-park-after", "300ms", "-log-connections=false")
	if got := notes.next(t); got != "READY=1" {
		t.Errorf("at start the proxy told systemd %q, want READY=1", got)
	}
	lab.start(f.addr, streams, idle)
	f.waitLive(streams + idle)
	var refused atomic.Int64
	stopDialing := lab.dialSteadily(f.addr, &refused)

	prev := f.status()
	var maxLived time.Duration
	for i := 1; i <= upgrades; i++ {
		next, ver := builds.b, "vB"
		if i%2 == 0 {
			next, ver = builds.a, "vA"
		}
		install(t, next, path)
		line, lived := f.upgrade(i)
		maxLived = max(maxLived, lived)
		// The old process names the new one before it exits, so the
		// service always has a main process; the new one says it is ready.
		got := []string{notes.next(t), notes.next(t)}
		slices.Sort(got)
		if want := []string{fmt.Sprintf("MAINPID=%d", f.pid()), fmt.Sprintf("MAINPID=%d\nREADY=1", f.pid())}; !slices.Equal(got, want) {
			t.Errorf("upgrade %d: systemd was told %q, want %q", i, got, want)
		}
		t.Logf("upgrade %d to %s: %s; old process gone %v after the signal; new process VmRSS %s",
			i, ver, line[strings.Index(line, "conns="):], lived.Round(time.Millisecond), vmRSS(f.pid()))
		s := f.status()
		if s.Version != ver {
			t.Fatalf("after upgrade %d /status says version %q, want %q", i, s.Version, ver)
		}
		if s.Totals.Upgrades != int64(i) || s.Totals.Accepted < prev.Totals.Accepted {
			t.Fatalf("after upgrade %d: upgrades %d, accepted %d (was %d): counters did not go on",
				i, s.Totals.Upgrades, s.Totals.Accepted, prev.Totals.Accepted)
		}
		for j, u := range s.Upstreams {
			if u.BytesUp < prev.Upstreams[j].BytesUp || u.BytesDown < prev.Upstreams[j].BytesDown {
				t.Fatalf("after upgrade %d: %s's byte counters went back", i, u.Addr)
			}
		}
		prev = s
		// Let the streams run and the idle connections park again.
		time.Sleep(time.Second)
	}
	metrics := get(t, "http://"+f.admin+"/metrics")
	if want := fmt.Sprintf(`pinproxy_upgrades_total{result="ok"} %d`, upgrades); !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %q", want)
	}
	stopDialing()
	lab.finish(streams + idle)
	t.Logf("%d streams and %d idle connections, %d upgrades, %d steady dials (%d refused); the old process lived at most %v after the signal",
		streams, idle, upgrades, lab.probes.Load(), refused.Load(), maxLived.Round(time.Millisecond))
}

// A bad release takes nothing: a new binary that exits at once, says
// nothing, is SIGKILLed at each step of the hand-over (its descriptors
// closed with it), panics or hangs right after adopting, or hangs after
// the commit. Each time the old process takes every connection back and
// serves on, the listener is the same kernel socket throughout and never
// refuses a dial, and at the end every stream is whole at both ends.
func TestBinaryUpgradeRollsBack(t *testing.T) {
	buildVariants(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "pinproxy")
	install(t, builds.a, path)
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	step := func(s string) string { return script(s, "BADNEW_STEP="+s+" exec "+builds.bad+` "$@"`) }
	lab := newStreamLab(t, 2, 100*time.Millisecond)
	f := startFamily(t, path, nil, "-upstreams", lab.upstreams(), "-rebalance-interval", "0",
		"-park-after", "300ms", "-log-connections=false", "-upgrade-timeout", "3s")
	const streams, idle = 50, 350 // more than two batches of connections
	lab.start(f.addr, streams, idle)
	f.waitLive(streams + idle)
	inode := listenInode(t, f.addr)
	var refused atomic.Int64
	stopDialing := lab.dialSteadily(f.addr, &refused)
	pid := f.pid()

	const killed = "signal: killed|closed the socket|broken pipe|reset by peer"
	for i, bad := range []struct{ name, path, why string }{
		{"exits at once", script("exits", "exit 3"), "exit status 3|closed the socket|broken pipe"},
		{"says nothing", step("silent"), "stalled: it did not send its request"},
		{"is killed once it has the hello", step("hello"), killed},
		{"is killed once it has a batch", step("batch"), killed},
		{"is killed once it has everything", step("have"), killed},
		{"panics right after adopting", step("adopt-panic"), "exit status 2|closed the socket"},
		{"hangs right after adopting", step("adopt-hang"), "not ready within -upgrade-timeout"},
		{"is killed once it is ready", step("ready"), killed},
		{"is killed once it has the commit", step("commit"), killed},
		{"hangs once it has the commit", step("commit-hang"), "stalled: it did not say it serves"},
	} {
		install(t, bad.path, path)
		if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		f.waitCount(`msg="upgrade failed; keeping every connection and serving on"`, i+1)
		f.mu.Lock()
		var line string
		for _, l := range f.lines {
			if strings.Contains(l, "upgrade failed; keeping") {
				line = l
			}
		}
		f.mu.Unlock()
		if !regexp.MustCompile(bad.why).MatchString(line) {
			t.Errorf("a new binary that %s: the log says %q, want the reason (%q)", bad.name, line, bad.why)
		}
		t.Logf("a new binary that %s: %s", bad.name, line[strings.Index(line, "msg="):])
		s := f.status()
		if s.Totals.UpgradesFailed != int64(i+1) || f.pid() != pid || gone(pid) {
			t.Fatalf("after a new binary that %s: upgrades_failed %d, want %d; pid %d, want %d still serving",
				bad.name, s.Totals.UpgradesFailed, i+1, f.pid(), pid)
		}
		if got := listenInode(t, f.addr); got != inode {
			t.Fatalf("after a new binary that %s: the listening socket is inode %s, was %s", bad.name, got, inode)
		}
		// The streams go on through the old process, which accepts again.
		time.Sleep(300 * time.Millisecond)
		f.waitLive(streams + idle)
	}
	// And a good binary still takes over, on the same listening socket.
	install(t, builds.b, path)
	f.upgrade(1)
	if s := f.status(); s.Version != "vB" || s.Totals.UpgradesFailed != 10 || s.Totals.Upgrades != 1 {
		t.Errorf("after the good upgrade: version %q, upgrades %d, failed %d; want vB, 1, 10", s.Version, s.Totals.Upgrades, s.Totals.UpgradesFailed)
	}
	if got := listenInode(t, f.addr); got != inode {
		t.Errorf("after the good upgrade the listening socket is inode %s, was %s", got, inode)
	}
	stopDialing()
	lab.finish(streams + idle)
	if refused.Load() > 0 {
		t.Errorf("%d steady dials refused", refused.Load())
	}
}

// notes is a unixgram socket standing in for systemd's NOTIFY_SOCKET.
type notes struct {
	path string
	got  chan string
}

func notifySocket(t *testing.T) *notes {
	t.Helper()
	n := &notes{path: filepath.Join(t.TempDir(), "notify"), got: make(chan string, 64)}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			m, err := c.Read(buf)
			if err != nil {
				return
			}
			n.got <- string(buf[:m])
		}
	}()
	return n
}

func (n *notes) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-n.got:
		return s
	case <-time.After(pinproxytest.WaitFor):
		t.Fatal("nothing was sent to NOTIFY_SOCKET")
		return ""
	}
}

// A process started with -upgrade-socket takes everything from the one
// listening there, which then exits: how an embedder's program, or a
// service manager, upgrades without a signal.
func TestBinaryUpgradeSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "upgrade.sock")
	lab := newStreamLab(t, 2, 100*time.Millisecond)
	args := []string{"-upstreams", lab.upstreams(), "-rebalance-interval", "0", "-park-after", "300ms",
		"-log-connections=false", "-upgrade-socket", sock}
	old := startFamily(t, binary, nil, args...)
	const streams, idle = 20, 40
	lab.start(old.addr, streams, idle)
	old.waitLive(streams + idle)
	oldPID := old.pid()

	nu := startFamily(t, binary, nil, args...)
	if nu.addr != old.addr || nu.admin != old.admin {
		t.Fatalf("the new process listens on %s and %s, want the old one's %s and %s", nu.addr, nu.admin, old.addr, old.admin)
	}
	old.waitCount(`msg="upgrade: connections handed over"`, 1)
	testkit.WaitForWithin(t, 10*time.Second, "the old process to exit once the new one took over", func() bool { return gone(oldPID) })
	if s := nu.status(); s.Totals.Upgrades != 1 || s.Totals.Live < streams+idle {
		t.Errorf("the new process: %d upgrades, %d live; want 1 and %d", s.Totals.Upgrades, s.Totals.Live, streams+idle)
	}
	// And the new one listens on the socket in turn.
	third := startFamily(t, binary, nil, args...)
	if third.addr != old.addr {
		t.Fatalf("a third process listens on %s, want %s", third.addr, old.addr)
	}
	lab.finish(streams + idle)
}

// The seed's first case with an upgrade in the middle: B is down, both
// clients are on A, and rounds move nothing, before the upgrade and after
// it (B's state moves with the connections); once B answers, the new
// process moves the newer connection, one only.
func TestBinaryUpgradeKeepsTheSeedsRules(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	f := startFamily(t, binary, nil, "-upstreams", a.Addr+","+b.Addr, "-rebalance-interval", "200ms", "-dial-timeout", "2s",
		"-log-level", "debug")
	older, on1 := pinproxytest.Dial(t, f.addr, "older")
	newer, on2 := pinproxytest.Dial(t, f.addr, "newer")
	if on1 != "A" || on2 != "A" {
		t.Fatalf("clients landed on %s and %s while B is down, want A and A", on1, on2)
	}
	f.waitCount(downRound, 2)
	f.upgrade(1)
	f.mu.Lock()
	before := count(f.lines, downRound)
	f.mu.Unlock()
	f.waitCount(downRound, before+2) // the new process's rounds
	for _, cl := range []*pinproxytest.Client{older, newer} {
		if on, err := cl.Ping(); err != nil || on != "A" {
			t.Fatalf("client %s after the upgrade: on %q, %v", cl.ID, on, err)
		}
	}
	f.mu.Lock()
	moved := count(f.lines, movedRound)
	f.mu.Unlock()
	if moved != 0 {
		t.Fatalf("%d moves while B was down", moved)
	}
	b.Start()
	if !newer.Closed() {
		t.Fatal("the newer connection was not closed once B answered")
	}
	f.waitCount(fmt.Sprintf(`%s from=%s to=%s`, movedRound, a.Addr, b.Addr), 1)
	if on := newer.Redial(); on != "B" {
		t.Fatalf("redial landed on %s, want B", on)
	}
	if on, err := older.Ping(); err != nil || on != "A" {
		t.Fatalf("older client: on %q, %v; want still on A", on, err)
	}
	f.waitCount(evenRound, 3)
	f.mu.Lock()
	moved = count(f.lines, movedRound)
	f.mu.Unlock()
	if moved != 1 {
		t.Errorf("%d moves in all, want 1", moved)
	}
}

// vmRSS returns process pid's resident memory as /proc says it.
func vmRSS(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "?"
}

// tally stops every stream and counts those that arrived whole at both
// ends, for a measurement that expects some not to.
func (lab *streamLab) tally() (whole, broken int) {
	close(lab.stop)
	done := make(chan struct{})
	go func() { lab.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * pinproxytest.WaitFor):
	}
	time.Sleep(time.Second) // the upstream ends record after their clients
	lab.mu.Lock()
	defer lab.mu.Unlock()
	for _, e := range lab.ends {
		if e.upGot != nil && bytes.Equal(e.clientSent, e.upGot) && bytes.Equal(e.upSent, e.clientGot) {
			whole++
		} else {
			broken++
		}
	}
	return whole, broken
}

// HAProxy's reload measured the way the upgrade tests measure pinproxy's:
// idle connections through it, a new process started with -sf (its
// seamless reload, listeners passed on), and hard-stop-after 10s. Run
// with PINPROXY_HAPROXY_RELOAD=N (connections; at most 7,000 under an
// open-file limit of 20,000); figures in docs/benchmarks.md.
func TestHAProxyReloadForComparison(t *testing.T) {
	v := os.Getenv("PINPROXY_HAPROXY_RELOAD")
	if v == "" {
		t.Skip("a measurement: set PINPROXY_HAPROXY_RELOAD=1000 to run it")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 7000 {
		t.Fatalf("PINPROXY_HAPROXY_RELOAD=%q: want a number of connections from 1 to 7000", v)
	}
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("no haproxy")
	}
	lab := newStreamLab(t, 1, time.Second)
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`global
	maxconn 7000
	hard-stop-after 10s
defaults
	mode tcp
	timeout connect 5s
	timeout client 1h
	timeout server 1h
frontend f
	bind %s
	default_backend b
backend b
	server u %s
`, addr, lab.upstreams())), 0o644)
	run := func(args ...string) *exec.Cmd {
		cmd := exec.Command("haproxy", append([]string{"-db", "-f", cfg}, args...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	old := run()
	oldDone := make(chan struct{})
	go func() { old.Wait(); close(oldDone) }()
	var c net.Conn
	for deadline := time.Now().Add(pinproxytest.WaitFor); ; time.Sleep(10 * time.Millisecond) {
		if c, err = net.Dial("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	lab.start(addr, 0, n)
	time.Sleep(time.Second)
	t0 := time.Now()
	run("-sf", strconv.Itoa(old.Process.Pid))
	select {
	case <-oldDone:
	case <-time.After(time.Minute):
		t.Fatal("the old haproxy still runs a minute after the reload")
	}
	lived := time.Since(t0)
	whole, broken := lab.tally()
	t.Logf("haproxy reload (-sf, hard-stop-after 10s) with %d idle connections: the old process lived %v; %d connections went on, %d were cut",
		n, lived.Round(10*time.Millisecond), whole, broken)
}

// SIGUSR2 during a drain neither upgrades nor closes what is left.
func TestBinaryUpgradeSignalDuringDrain(t *testing.T) {
	up := pinproxytest.New(t, "A", pinproxytest.Line)
	p := start(t, nil, "-upstreams", up.Addr, "-shutdown-timeout", "30s")
	cl, on := pinproxytest.Dial(t, p.addr, "c")
	if on != "A" {
		t.Fatalf("on %s", on)
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	p.waitLines(func(l []string) bool { return count(l, `msg="signal received; draining"`) == 1 })
	p.Cmd.Process.Signal(syscall.SIGUSR2)
	p.waitLines(func(l []string) bool {
		return count(l, `msg="signal during the drain; ignored" signal="user defined signal 2"`) == 1
	})
	if on, err := cl.Ping(); err != nil || on != "A" {
		t.Fatalf("after SIGUSR2 during the drain: on %q, %v", on, err)
	}
	if n := count(p.log(), "upgrade:"); n != 0 {
		t.Errorf("%d upgrade lines during a drain", n)
	}
}

// An upgrade after a reload removed an upstream, and while the health
// checks hold another down: the new process reads the same file, keeps
// the removed upstream's connection on it, and keeps the down upstream
// down, counters and all, until the checks say otherwise.
func TestBinaryUpgradeAfterReloadAndHealthFailure(t *testing.T) {
	a := pinproxytest.New(t, "A", pinproxytest.Line)
	b := pinproxytest.Down(t, "B", pinproxytest.Line)
	c := pinproxytest.New(t, "C", pinproxytest.Line)
	file := filepath.Join(t.TempDir(), "upstreams")
	if err := os.WriteFile(file, []byte(c.Addr+"\n"+a.Addr+"\n"+b.Addr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := startFamily(t, binary, nil, "-upstreams-file", file, "-rebalance-interval", "0",
		"-check-interval", "100ms", "-check-fall", "2", "-check-rise", "1000")
	onC, on := pinproxytest.Dial(t, f.addr, "on-c")
	if on != "C" {
		t.Fatalf("first client on %s, want C", on)
	}
	f.waitCount(`msg="health check: upstream down"`, 1)
	if err := os.WriteFile(file, []byte(a.Addr+"\n"+b.Addr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(f.pid(), syscall.SIGHUP)
	f.waitCount(`msg="upstreams set"`, 1)
	before := f.status()
	b.Start() // up again, but -check-rise 1000 keeps it down for 100 s

	f.upgrade(1)
	s := f.status()
	byAddr := func(s status, addr string) (live int, found bool) {
		for _, u := range s.Upstreams {
			if u.Addr == addr {
				return u.Live, true
			}
		}
		return 0, false
	}
	if live, ok := byAddr(s, c.Addr); !ok || live != 1 {
		t.Errorf("after the upgrade the removed upstream C: listed %v with %d live, want its 1 connection", ok, live)
	}
	var raw struct {
		Upstreams []struct {
			Addr     string `json:"addr"`
			State    string `json:"state"`
			Removed  bool   `json:"removed"`
			Failures int64  `json:"failures"`
		} `json:"upstreams"`
	}
	json.Unmarshal([]byte(get(t, "http://"+f.admin+"/status")), &raw)
	for _, u := range raw.Upstreams {
		switch u.Addr {
		case b.Addr:
			if u.State != "down" || u.Failures < 2 {
				t.Errorf("after the upgrade B is %s with %d failures, want still down, its failures counted on", u.State, u.Failures)
			}
		case c.Addr:
			if !u.Removed {
				t.Error("after the upgrade C is not marked removed")
			}
		}
	}
	for range 4 {
		if _, on := pinproxytest.Dial(t, f.addr, "new"); on != "A" {
			t.Fatalf("a new client after the upgrade landed on %s, want A (B down by the checks, C removed)", on)
		}
	}
	if on, err := onC.Ping(); err != nil || on != "C" {
		t.Errorf("the client on the removed upstream: %q, %v", on, err)
	}
	if s.Totals.Accepted < before.Totals.Accepted {
		t.Errorf("accepted went from %d to %d", before.Totals.Accepted, s.Totals.Accepted)
	}
}

// The upgrade socket admits only its owner and pauses nothing for a
// process that connects and says nothing: it is dropped after 2 s while
// clients come and go, and a real new process takes over after it. A
// path in a directory everyone can write to is refused at both ends.
func TestBinaryUpgradeSocketGuarded(t *testing.T) {
	up := pinproxytest.New(t, "A", pinproxytest.Line)
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o1777)
	unsafe := filepath.Join(open, "upgrade.sock")
	out, err := exec.Command(binary, "-listen", "127.0.0.1:0", "-upstreams", up.Addr, "-upgrade-socket", unsafe).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "writable by others") {
		t.Errorf("a process given -upgrade-socket %s: %v, %s; want exit 2 saying why", unsafe, err, out)
	}

	// The binary and a silent stand-in installed side by side: the
	// socket admits processes run from its binary's directory.
	buildVariants(t)
	dir := t.TempDir()
	path, silentPath := filepath.Join(dir, "pinproxy"), filepath.Join(dir, "badnew")
	install(t, builds.a, path)
	install(t, builds.bad, silentPath)
	sock := filepath.Join(t.TempDir(), "upgrade.sock")
	args := []string{"-upstreams", up.Addr, "-rebalance-interval", "0", "-upgrade-socket", sock}
	old := startFamily(t, path, nil, args...)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the upgrade socket: %v, %v; want mode 0600", fi.Mode(), err)
	}
	// This test's own process runs from elsewhere: refused at once.
	if c, err := net.Dial("unixpacket", sock); err == nil {
		c.Close()
	}
	old.waitCount(`msg="upgrade socket: refused a process"`, 1)
	cl, on := pinproxytest.Dial(t, old.addr, "before")
	if on != "A" {
		t.Fatalf("on %s", on)
	}
	silent := exec.Command(silentPath)
	silent.Env = append(os.Environ(), "BADNEW_STEP=silent", "BADNEW_SOCKET="+sock)
	if err := silent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { silent.Process.Kill(); silent.Wait() }()
	t0 := time.Now()
	for time.Since(t0) < 1500*time.Millisecond { // traffic flows while it says nothing
		if on, err := cl.Ping(); err != nil || on != "A" {
			t.Fatalf("a ping %v after the silent process connected: %q, %v", time.Since(t0).Round(time.Millisecond), on, err)
		}
		if _, on := pinproxytest.Dial(t, old.addr, "during"); on != "A" {
			t.Fatalf("a new client %v after the silent process connected: on %q", time.Since(t0).Round(time.Millisecond), on)
		}
		time.Sleep(100 * time.Millisecond)
	}
	old.waitCount(`stalled: it did not send its request within 2s`, 1)
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the silent process was dropped after %v, want about 2 s", d)
	}
	nu := startFamily(t, path, nil, args...)
	old.waitCount(`msg="upgrade: connections handed over"`, 1)
	if nu.addr != old.addr {
		t.Fatalf("the new process listens on %s, want %s", nu.addr, old.addr)
	}
	if on, err := cl.Ping(); err != nil || on != "A" {
		t.Fatalf("after the upgrade: %q, %v", on, err)
	}
}

// A process that connects to -upgrade-socket, adopts everything and then
// hangs is killed when the old process takes everything back, as a child
// started by SIGUSR2 is: alive, it would hold a copy of every socket, and
// a connection the old process then closed would send its peers no FIN.
func TestBinaryUpgradeSocketKillsHungAdopter(t *testing.T) {
	up := pinproxytest.New(t, "A", pinproxytest.Line)
	buildVariants(t)
	dir := t.TempDir()
	path, badPath := filepath.Join(dir, "pinproxy"), filepath.Join(dir, "badnew")
	install(t, builds.a, path)
	install(t, builds.bad, badPath)
	sock := filepath.Join(t.TempDir(), "upgrade.sock")
	old := startFamily(t, path, nil, "-upstreams", up.Addr, "-rebalance-interval", "0", "-upgrade-socket", sock, "-upgrade-timeout", "1s")
	cl, on := pinproxytest.Dial(t, old.addr, "c")
	if on != "A" {
		t.Fatalf("on %s", on)
	}
	bad := exec.Command(badPath)
	bad.Env = append(os.Environ(), "BADNEW_STEP=adopt-hang", "BADNEW_SOCKET="+sock)
	if err := bad.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- bad.Wait(); close(exited) }()
	defer func() {
		bad.Process.Kill()
		<-exited
	}()
	old.waitCount(`msg="upgrade failed; keeping every connection and serving on"`, 1)
	select {
	case err := <-exited:
		if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the hung process ended with %v, want killed", err)
		}
	case <-time.After(pinproxytest.WaitFor):
		t.Fatalf("the hung process still runs %v after the old process took everything back", pinproxytest.WaitFor)
	}
	if on, err := cl.Ping(); err != nil || on != "A" {
		t.Fatalf("after the failed upgrade: %q, %v", on, err)
	}
	// The client half-closes; the node ends the session, and its end
	// reaches the client.
	cl.Conn.(*net.TCPConn).CloseWrite()
	cl.Conn.SetReadDeadline(time.Now().Add(pinproxytest.WaitFor))
	if _, err := io.Copy(io.Discard, cl.Conn); err != nil {
		t.Errorf("after the client half-closed: %v, want the node's end (EOF)", err)
	}
}

// openFiles returns how many descriptors process pid has open.
func openFiles(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// children returns the children of process pid, forked by any of its
// threads (the Go runtime forks a short-lived one of its own, to check
// for pidfd, before the first process it starts).
func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// `pkill -HUP pinproxy` (a reload of the upstreams file) during an
// upgrade signals the new process too, at any moment: between the fork
// and the exec, before its runtime catches signals, while it takes the
// connections. None of them kills it: every round's hand-over commits,
// and the connection made before the first goes on.
func TestBinaryUpgradeSurvivesSIGHUP(t *testing.T) {
	buildVariants(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "pinproxy")
	install(t, builds.a, path)
	up := pinproxytest.New(t, "A", pinproxytest.Line)
	f := startFamily(t, path, nil, "-upstreams", up.Addr, "-rebalance-interval", "0")
	cl, on := pinproxytest.Dial(t, f.addr, "before")
	if on != "A" {
		t.Fatalf("on %s", on)
	}
	install(t, builds.b, path)
	for round := 1; round <= 3; round++ {
		old := f.pid()
		if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		signalled := 0
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !gone(old); time.Sleep(100 * time.Microsecond) {
			f.mu.Lock()
			done := count(f.lines, `msg="upgrade: connections handed over"`) >= round || count(f.lines, "upgrade failed") > 0
			f.mu.Unlock()
			if done {
				break
			}
			for _, nu := range children(old) {
				syscall.Kill(nu, syscall.SIGHUP)
				signalled++
			}
		}
		f.mu.Lock()
		failed := count(f.lines, "upgrade failed")
		f.mu.Unlock()
		if failed > 0 {
			t.Fatalf("round %d: the upgrade failed after %d SIGHUPs to the new process", round, signalled)
		}
		f.waitCount(`msg="upgrade: connections handed over"`, round)
		testkit.WaitForWithin(t, 10*time.Second, "the old process to exit", func() bool { return gone(old) })
		if on, err := cl.Ping(); err != nil || on != "A" {
			t.Fatalf("round %d: the client's ping after the upgrade: %q, %v", round, on, err)
		}
		t.Logf("round %d: %d SIGHUPs to the new process during its start", round, signalled)
	}
}

// `kill -USR2 $(pidof pinproxy)` during a hand-over signals the old
// process and the new one alike, at any moment: between the fork and the
// exec, before the new runtime catches signals, while it takes the
// connections. The signals are part of the hand-over under way: every
// listener moves, the listening socket stays the same kernel socket, and
// no dial is refused or stream cut.
func TestBinaryUpgradeSignalsCoalesce(t *testing.T) {
	buildVariants(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "pinproxy")
	install(t, builds.a, path)
	lab := newStreamLab(t, 2, 100*time.Millisecond)
	f := startFamily(t, path, nil, "-upstreams", lab.upstreams(), "-rebalance-interval", "0",
		"-park-after", "300ms", "-log-connections=false")
	const streams, idle = 50, 2000 // a hand-over long enough to signal into
	lab.start(f.addr, streams, idle)
	f.waitLive(streams + idle)
	inode := listenInode(t, f.addr)
	var refused atomic.Int64
	stopDialing := lab.dialSteadily(f.addr, &refused)
	install(t, builds.b, path)
	rounds := 0 // signalled during the hand-over
	for round := 1; round <= 3; round++ {
		old := f.pid()
		if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		// Signal every child of the old process, and the old process
		// with it, as soon as it is seen (between fork and exec, or
		// before its runtime catches signals) and again once it holds
		// descriptors by the hundred, taking the hand-over. Stop at the
		// old process's commit: a signal after it is an operator's next
		// upgrade (the new process starts to serve, and to take one,
		// some 100 ms later, time enough for this loop to see the line).
		signalled, seen, busy := false, map[int]bool{}, map[int]bool{}
	poll:
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !gone(old); time.Sleep(200 * time.Microsecond) {
			for _, nu := range children(old) {
				if seen[nu] && (busy[nu] || openFiles(nu) <= 100) {
					continue
				}
				f.mu.Lock()
				committed := count(f.lines, `msg="upgrade: connections handed over"`) >= round
				f.mu.Unlock()
				if committed {
					break poll
				}
				busy[nu] = seen[nu]
				seen[nu] = true
				syscall.Kill(old, syscall.SIGUSR2)
				syscall.Kill(nu, syscall.SIGUSR2)
				signalled = true
			}
		}
		if signalled {
			rounds++
		}
		f.waitCount(`msg="upgrade: connections handed over"`, round)
		testkit.WaitForWithin(t, 10*time.Second, "the old process to exit", func() bool { return gone(old) })
		time.Sleep(500 * time.Millisecond) // a hand-over the new one might start by mistake
		f.mu.Lock()
		handed, coalesced := count(f.lines, `msg="upgrade: connections handed over"`), count(f.lines, `coalesced into it`)
		var line string
		for _, l := range f.lines {
			if handedOverRE.MatchString(l) {
				line = l
			}
		}
		f.mu.Unlock()
		if handed != round {
			t.Fatalf("round %d: %d hand-overs, want %d: a queued SIGUSR2 started another", round, handed, round)
		}
		if !strings.Contains(line, " listeners=2 ") {
			t.Fatalf("round %d: %s; want both listeners moved", round, line)
		}
		if got := listenInode(t, f.addr); got != inode {
			t.Fatalf("round %d: the listening socket is inode %s, was %s", round, got, inode)
		}
		t.Logf("round %d: signalled during the hand-over %v, %d signals coalesced so far; %s", round, signalled, coalesced, line[strings.Index(line, "conns="):])
	}
	f.mu.Lock()
	coalesced := count(f.lines, `coalesced into it`)
	f.mu.Unlock()
	if rounds == 0 || coalesced == 0 {
		t.Errorf("%d rounds caught the new process during its hand-over, %d signals coalesced; want some", rounds, coalesced)
	}
	stopDialing()
	lab.finish(streams + idle)
	if refused.Load() > 0 {
		t.Errorf("%d steady dials refused", refused.Load())
	}
}

// A process of wire version 1 (a build before this one, whose old
// process commits at once and lets go) upgrades to this build: the new
// process takes everything over the old protocol, and the next upgrade
// speaks the new one. It needs that build: run with
// PINPROXY_V1_BINARY=path, the binary built from a tree of that time
// (git archive 3f1d395 | tar -x -C DIR; go build ./cmd/pinproxy in DIR).
func TestBinaryUpgradeFromVersion1(t *testing.T) {
	v1 := os.Getenv("PINPROXY_V1_BINARY")
	if v1 == "" {
		t.Skip("set PINPROXY_V1_BINARY to a pinproxy built with wire version 1")
	}
	buildVariants(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "pinproxy")
	install(t, v1, path)
	lab := newStreamLab(t, 2, 100*time.Millisecond)
	f := startFamily(t, path, nil, "-upstreams", lab.upstreams(), "-rebalance-interval", "0",
		"-park-after", "300ms", "-log-connections=false")
	const streams, idle = 100, 400
	lab.start(f.addr, streams, idle)
	f.waitLive(streams + idle)
	inode := listenInode(t, f.addr)
	var refused atomic.Int64
	stopDialing := lab.dialSteadily(f.addr, &refused)
	for i, next := range []string{builds.b, builds.a} {
		install(t, next, path)
		line, lived := f.upgrade(i + 1)
		t.Logf("upgrade %d: %s; old process gone %v after the signal", i+1, line[strings.Index(line, "conns="):], lived.Round(time.Millisecond))
		time.Sleep(time.Second)
	}
	if got := listenInode(t, f.addr); got != inode {
		t.Errorf("the listening socket is inode %s, was %s", got, inode)
	}
	stopDialing()
	lab.finish(streams + idle)
	if refused.Load() > 0 {
		t.Errorf("%d steady dials refused", refused.Load())
	}
}
