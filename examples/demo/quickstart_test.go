//go:build linux

package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// root is the repository's root, relative to this package.
const root = "../.."

// wait is how long one step of a quick start may take to show what the
// README says; generous, for a loaded 2-core machine.
const wait = 30 * time.Second

// A block is one fenced block of a quick start: sh (commands to run) or
// a sample of the log lines they lead to.
type block struct {
	sh   bool
	text string
	line int // of the opening fence in README.md
}

// quickstart returns the fenced blocks between "<!-- quickstart NAME" and
// the next "<!-- end quickstart -->" in README.md.
func quickstart(t *testing.T, name string) []block {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks        []block
		in, inFence   bool
		found, closed bool
		cur           block
		body          strings.Builder
	)
	for i, l := range strings.Split(string(data), "\n") {
		switch {
		case !in:
			if rest, ok := strings.CutPrefix(l, "<!-- quickstart "+name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, ":")) {
				in, found = true, true
			}
		case inFence:
			if l == "```" {
				cur.text, inFence = body.String(), false
				blocks = append(blocks, cur)
				continue
			}
			body.WriteString(l + "\n")
		case strings.HasPrefix(l, "```"):
			lang := strings.TrimPrefix(l, "```")
			if lang != "" && lang != "sh" {
				t.Fatalf("README.md:%d: a %q block in quick start %q; want sh or none", i+1, lang, name)
			}
			cur, inFence = block{sh: lang == "sh", line: i + 1}, true
			body.Reset()
		case l == "<!-- end quickstart -->":
			in, closed = false, true
		}
		if closed {
			break
		}
	}
	if !found || !closed {
		t.Fatalf("README.md: no quick start %q between <!-- quickstart %s --> and <!-- end quickstart -->", name, name)
	}
	return blocks
}

// build is proofkit-agent, pinproxy and platform, built once for the
// package's tests.
var build = testkit.Build{
	Pkgs: []string{"github.com/proofkit/nodekit/cmd/proofkit-agent",
		"github.com/proofkit/nodekit/cmd/pinproxy",
		"github.com/proofkit/nodekit/examples/platform"},
	Env: []string{"CGO_ENABLED=0"},
}

// binaries builds proofkit-agent, pinproxy and platform once for the
// package's tests and returns their directory.
func binaries(t *testing.T) string {
	t.Helper()
	return build.Dir(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	build.Clean()
	os.Exit(code)
}

// A session is one bash, in a network namespace of its own, fed the
// quick start's blocks on its standard input as a reader pastes them;
// job control is on, so %1 and kill %2 work as in a terminal.
type session struct {
	t    *testing.T
	dir  string
	proc *testkit.Proc
	in   io.WriteCloser
	pid  int
	ns   nsID
	n    int // blocks sent
}

type nsID struct{ dev, ino uint64 }

func netnsOf(pid int) (nsID, error) {
	fi, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nsID{}, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return nsID{uint64(st.Dev), st.Ino}, nil
}

// start skips t unless it may make a network namespace, builds the
// binaries and starts the session in a fresh temporary directory with
// the repository's examples/ linked in, the binaries first in PATH.
func start(t *testing.T, tools ...string) *session {
	t.Helper()
	testkit.NeedRoot(t, append([]string{"bash", "unshare", "nsenter", "ip", "curl"}, tools...)...)
	bin := binaries(t)
	dir := t.TempDir()
	abs, err := filepath.Abs(filepath.Join(root, "examples"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--net", "--", "bash", "--norc", "--noprofile", "-s")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+dir)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, dir: dir, in: in}
	s.proc = testkit.StartProc(t, cmd, nil)
	s.pid = cmd.Process.Pid
	// Runs before StartProc's clean-up: every process of the namespace
	// (the quick start's background jobs) goes, not only bash.
	t.Cleanup(func() {
		s.killAll()
		if t.Failed() {
			t.Logf("session output:\n%s", s.proc.Log.String())
		}
	})
	s.send("set -m\nip link set lo up\necho @@ready\n")
	s.waitOutput("the session to start", "@@ready")
	if s.ns, err = netnsOf(s.pid); err != nil {
		t.Fatal(err)
	}
	if host, err := netnsOf(os.Getpid()); err != nil || host == s.ns {
		t.Fatalf("the session is not in a network namespace of its own (%v)", err)
	}
	return s
}

func (s *session) send(text string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, text); err != nil {
		s.t.Fatalf("writing to the session: %v", err)
	}
}

func (s *session) waitOutput(what, marker string) {
	s.t.Helper()
	testkit.WaitForWithin(s.t, wait, what, func() bool { return strings.Contains(s.proc.Log.String(), marker) })
}

// run sends b's commands, between markers, without waiting for them to
// finish (a block may end in a command that runs in the foreground).
func (s *session) run(b block) int {
	s.t.Helper()
	s.n++
	s.send(fmt.Sprintf("echo @@begin-%d\n%secho @@done-%d\n", s.n, b.text, s.n))
	return s.n
}

// finished waits for block n to finish and returns what it printed,
// without the lines the background jobs logged meanwhile.
func (s *session) finished(n int) string {
	s.t.Helper()
	s.waitOutput(fmt.Sprintf("block %d to finish", n), fmt.Sprintf("@@done-%d\n", n))
	out := s.proc.Log.String()
	begin := strings.Index(out, fmt.Sprintf("@@begin-%d\n", n))
	end := strings.Index(out, fmt.Sprintf("@@done-%d\n", n))
	var keep []string
	for _, l := range strings.Split(out[begin:end], "\n")[1:] {
		if label, rest := cutLabel(l); label == "" && !strings.HasPrefix(rest, "time=") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// pids lists the processes in the session's namespace.
func (s *session) pids() map[int]string {
	got := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := netnsOf(pid); err == nil && ns == s.ns {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			got[pid] = strings.TrimSpace(string(comm))
		}
	}
	return got
}

func (s *session) killAll() {
	if s.ns == (nsID{}) {
		return
	}
	for pid := range s.pids() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// pidOf returns the one process named comm in the session.
func (s *session) pidOf(comm string) int {
	s.t.Helper()
	for pid, c := range s.pids() {
		if c == comm {
			return pid
		}
	}
	s.t.Fatalf("no %s running in the session", comm)
	return 0
}

// waitOnlyShell waits until nothing but the session's bash is left.
func (s *session) waitOnlyShell(after string) {
	s.t.Helper()
	testkit.WaitForWithin(s.t, wait, "every job to stop after "+after, func() bool {
		for pid := range s.pids() {
			if pid != s.pid {
				return false
			}
		}
		return true
	})
}

// curl runs curl with args inside the session's namespace and returns
// its output; it fails t unless curl exits 0.
func (s *session) curl(args ...string) string {
	s.t.Helper()
	out, err := s.tryCurl(args...)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

func (s *session) tryCurl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/proc/" + strconv.Itoa(s.pid) + "/ns/net", "curl", "-s", "-S", "--max-time", "5"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("curl %s: %v", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// labelRE matches a line a quick start labelled with the name of the
// process that wrote it, as docker compose logs does: "platform | …".
var labelRE = regexp.MustCompile(`^([a-z][a-z0-9-]*) +\| (.*)$`)

// cutLabel returns the label of a labelled line and the line without it,
// or "" and the line.
func cutLabel(line string) (label, rest string) {
	if m := labelRE.FindStringSubmatch(line); m != nil {
		return m[1], m[2]
	}
	return "", line
}

// variable names the log keys whose values differ from run to run; a
// sample line in the README must show the key, and any value.
var variable = []string{"time", "at", "client", "duration", "lasted", "offered_again", "found", "err"}

// logfmt parses the key=value pairs of a slog text line. In a sample
// line "…" (or "...") stands for pairs left out.
func logfmt(line string) (map[string]string, []string, error) {
	pairs := map[string]string{}
	var keys []string
	rest := strings.TrimSpace(line)
	for rest != "" {
		if r, ok := cutEllipsis(rest); ok {
			rest = r
			continue
		}
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 || strings.ContainsAny(rest[:eq], " \"") {
			return nil, nil, fmt.Errorf("no key=value at %q", rest)
		}
		key, val := rest[:eq], ""
		rest = rest[eq+1:]
		if strings.HasPrefix(rest, `"`) {
			end := 1
			for end < len(rest) && rest[end] != '"' {
				if rest[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(rest) {
				return nil, nil, fmt.Errorf("unterminated quote in %q", rest)
			}
			v, err := strconv.Unquote(rest[:end+1])
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %v", rest[:end+1], err)
			}
			val, rest = v, rest[end+1:]
		} else {
			sp := strings.IndexByte(rest, ' ')
			if sp < 0 {
				sp = len(rest)
			}
			val, rest = rest[:sp], rest[sp:]
		}
		pairs[key] = val
		keys = append(keys, key)
		rest = strings.TrimLeft(rest, " ")
	}
	return pairs, keys, nil
}

// cutEllipsis cuts a leading "…" or "..." word from s.
func cutEllipsis(s string) (string, bool) {
	for _, e := range []string{"…", "..."} {
		if r, ok := strings.CutPrefix(s, e); ok && (r == "" || r[0] == ' ') {
			return strings.TrimLeft(r, " "), true
		}
	}
	return s, false
}

// matches reports whether got, a logged line, holds every pair of want,
// a sample line (any value for the variable keys).
func matches(want, got map[string]string, wantKeys []string) bool {
	for _, k := range wantKeys {
		v, ok := got[k]
		if !ok || (v != want[k] && !slices.Contains(variable, k)) {
			return false
		}
	}
	return true
}

// waitSamples waits until every line of sample block b has been logged,
// in the block's order: each after the line the one before it matched.
func (s *session) waitSamples(b block) {
	s.t.Helper()
	after := -1 // the log line the previous sample matched
	for i, l := range strings.Split(strings.TrimSpace(b.text), "\n") {
		// A labelled sample line matches only that process's lines.
		label, line := cutLabel(l)
		want, keys, err := logfmt(line)
		if err != nil {
			s.t.Fatalf("README.md:%d: sample line %q: %v", b.line+1+i, l, err)
		}
		seen := func() bool {
			for k, g := range strings.Split(s.proc.Log.String(), "\n") {
				gotLabel, g := cutLabel(g)
				if k <= after || label != "" && gotLabel != label {
					continue
				}
				if got, _, err := logfmt(g); err == nil && matches(want, got, keys) {
					after = k
					return true
				}
			}
			return false
		}
		testkit.WaitForWithin(s.t, wait, fmt.Sprintf("the line README.md:%d shows: %s", b.line+1+i, l), seen)
	}
}

// play runs a quick start's blocks in order: sh blocks are sent (each
// waiting for the one before to finish), sample blocks waited for. after
// holds checks to run once block i (from 0) is through.
func play(s *session, blocks []block, after map[int]func(out string)) {
	s.t.Helper()
	last := 0
	for i, b := range blocks {
		out := ""
		if b.sh {
			if last != 0 {
				s.finished(last)
			}
			last = s.run(b)
		} else {
			s.waitSamples(b)
		}
		if f := after[i]; f != nil {
			if b.sh {
				out = s.finished(last)
			}
			f(out)
		}
	}
	if last != 0 {
		s.finished(last)
	}
}

// TestQuickStartAgent runs "Quick start: the agent": the agent with
// -sysctl file writes the file, changes no kernel value, and serves its
// page and endpoints; Ctrl-C stops it.
func TestQuickStartAgent(t *testing.T) {
	blocks := quickstart(t, "agent")
	s := start(t)
	// Held until the end: another test that changes the host's values
	// for a moment (and restores them) does so before or after.
	t.Cleanup(testkit.LockHostSysctl(t))
	before := sysctls(t)
	play(s, blocks, map[int]func(string){
		1: func(string) {
			conf := filepath.Join(s.dir, "config", "99-proofkit-sysctl.conf")
			testkit.WaitForWithin(t, wait, "the agent to write "+conf, func() bool {
				_, err := os.Stat(conf)
				return err == nil
			})
			keys := confKeys(t, conf)
			if len(keys) == 0 {
				t.Fatalf("%s names no key", conf)
			}
			after := sysctls(t)
			for _, k := range keys {
				if before[k] != after[k] {
					t.Errorf("host sysctl %s changed from %q to %q", k, before[k], after[k])
				}
			}
			testkit.WaitForWithin(t, wait, "/readyz to answer", func() bool {
				_, err := s.tryCurl("--fail", "http://127.0.0.1:9464/readyz")
				return err == nil
			})
			if page := s.curl("--fail", "http://127.0.0.1:9464/"); !strings.Contains(page, "<html") {
				t.Errorf("the page at / is not HTML:\n%.300s", page)
			}
			s.curl("--fail", "http://127.0.0.1:9464/healthz")
			if m := s.curl("--fail", "http://127.0.0.1:9464/metrics"); !strings.Contains(m, "proofkit_") {
				t.Errorf("/metrics shows no proofkit_ metric:\n%.300s", m)
			}
			// Ctrl-C
			if err := syscall.Kill(s.pidOf("proofkit-agent"), syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
		},
	})
	if _, err := os.Stat(filepath.Join(s.dir, "state", "state.json")); err != nil {
		t.Errorf("after Ctrl-C, no state saved: %v", err)
	}
}

// sysctls reads every readable kernel value under /proc/sys/net, fs and
// vm of the test's (the host's) namespace, by key.
func sysctls(t *testing.T) map[string]string {
	t.Helper()
	vals := map[string]string{}
	for _, top := range []string{"net", "fs", "vm", "kernel"} {
		filepath.WalkDir(filepath.Join("/proc/sys", top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if info, err := d.Info(); err != nil || info.Mode().Perm()&0o444 == 0 {
				return nil
			}
			if b, err := os.ReadFile(path); err == nil {
				vals[strings.ReplaceAll(strings.TrimPrefix(path, "/proc/sys/"), "/", ".")] = string(b)
			}
			return nil
		})
	}
	return vals
}

// confKeys returns the keys a sysctl.d file sets.
func confKeys(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var keys []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		k, _, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("%s: line %q has no =", path, l)
		}
		keys = append(keys, strings.TrimSpace(k))
	}
	return keys
}

// TestQuickStartPinproxy runs "Quick start: pinproxy with two local
// upstreams": a connection each, failover when one goes, a connection
// moved back when it returns, and the final kill stops every job.
func TestQuickStartPinproxy(t *testing.T) {
	blocks := quickstart(t, "pinproxy")
	s := start(t, "socat")
	type status struct {
		Upstreams []struct {
			Addr string `json:"addr"`
			Live int    `json:"live"`
		} `json:"upstreams"`
	}
	live := func() map[string]int {
		out, err := s.tryCurl("http://127.0.0.1:9334/status")
		var st status
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			return nil
		}
		m := map[string]int{}
		for _, u := range st.Upstreams {
			m[u.Addr] = u.Live
		}
		return m
	}
	play(s, blocks, map[int]func(string){
		0: func(out string) {
			if !strings.Contains(out, `"upstreams"`) {
				t.Errorf("the block's curl of /status printed no upstreams:\n%s", out)
			}
			testkit.WaitForWithin(t, wait, `"live": 1 on each upstream`, func() bool {
				m := live()
				return m["127.0.0.1:9001"] == 1 && m["127.0.0.1:9002"] == 1
			})
		},
		1: func(string) {
			s.waitSamples(block{text: `level=INFO msg="connection ended" upstream=127.0.0.1:9002 reason="upstream closed"`, line: blocks[1].line})
			testkit.WaitForWithin(t, wait, "both clients on the first upstream", func() bool {
				m := live()
				return m["127.0.0.1:9001"] == 2 && m["127.0.0.1:9002"] == 0
			})
		},
		4: func(string) {
			testkit.WaitForWithin(t, wait, "a client back on the second upstream", func() bool {
				m := live()
				return m["127.0.0.1:9001"] == 1 && m["127.0.0.1:9002"] == 1
			})
		},
	})
	s.waitOnlyShell("the final kill")
}

// TestQuickStartRules runs "Quick start: the rules end to end": the
// overload starts, the notice is logged and listed, /admit refuses with
// the reason, the overload ends, the cool-down holds, admission returns.
func TestQuickStartRules(t *testing.T) {
	blocks := quickstart(t, "rules")
	s := start(t)
	type admit struct {
		Admit  *bool     `json:"admit"`
		Reason string    `json:"reason"`
		Why    string    `json:"why"`
		Until  time.Time `json:"until"`
	}
	token := func() string {
		b, err := os.ReadFile(filepath.Join(s.dir, "token"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	play(s, blocks, map[int]func(string){
		0: func(string) {
			fi, err := os.Stat(filepath.Join(s.dir, "token"))
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm&0o077 != 0 {
				t.Errorf("the token file's mode is %v; want no access for group and others", perm)
			}
		},
		2: func(out string) {
			dec := json.NewDecoder(strings.NewReader(out))
			var a admit
			if err := dec.Decode(&a); err != nil {
				t.Fatalf("/admit's answer: %v in:\n%s", err, out)
			}
			if a.Admit == nil || *a.Admit || a.Reason != "overloaded" || a.Why == "" {
				t.Errorf("/admit while overloaded: %+v; want admit false, reason overloaded, a why", a)
			}
			var notices []struct {
				Node string `json:"node"`
				Text string `json:"text"`
			}
			if err := dec.Decode(&notices); err != nil {
				t.Fatalf("/notices' answer: %v in:\n%s", err, out)
			}
			want := "de-fra-1 is overloaded: memory at 95 %"
			if len(notices) != 1 || notices[0].Node != "de-fra-1" || notices[0].Text != want {
				t.Errorf("/notices: %+v; want one, %q", notices, want)
			}
		},
		4: func(string) {
			// The overload has ended: the cool-down, then admission.
			var coolDown bool
			testkit.WaitForWithin(t, wait, "admission after the cool-down", func() bool {
				out, err := s.tryCurl("-H", "Authorization: Bearer "+token(), "127.0.0.1:8080/admit?node=de-fra-1")
				var a admit
				if err != nil || json.Unmarshal([]byte(out), &a) != nil || a.Admit == nil {
					return false
				}
				if !*a.Admit {
					if a.Reason != "cool-down" || a.Until.IsZero() {
						t.Fatalf("/admit after the overload ended: %s; want reason cool-down with until", out)
					}
					coolDown = true
				}
				return *a.Admit
			})
			if !coolDown {
				t.Error("admitted at once after the overload ended: no cool-down seen")
			}
		},
	})
	s.waitOnlyShell("the final kill")
}

// TestReadmeQuickStarts needs no root: each quick start is in README.md
// between its markers, has sh blocks, and its sample lines parse.
func TestReadmeQuickStarts(t *testing.T) {
	for _, name := range []string{"agent", "pinproxy", "rules"} {
		var sh int
		for _, b := range quickstart(t, name) {
			if b.sh {
				sh++
				continue
			}
			for i, l := range strings.Split(strings.TrimSpace(b.text), "\n") {
				label, line := cutLabel(l)
				if _, keys, err := logfmt(line); err != nil || len(keys) < 2 || keys[0] != "level" || keys[1] != "msg" {
					t.Errorf("README.md:%d: sample line %q: want level=… msg=… pairs (%v)", b.line+1+i, l, err)
				}
				// Where two processes log to one terminal, each line
				// says which wrote it.
				if name == "rules" && label == "" {
					t.Errorf("README.md:%d: sample line %q: want it labelled with its process (platform | …)", b.line+1+i, l)
				}
			}
		}
		if sh == 0 {
			t.Errorf("quick start %q has no sh block", name)
		}
	}
}

func TestLogfmt(t *testing.T) {
	got, keys, err := logfmt(`time=2026-12-01T23:09:23.205Z level=WARN msg="closing route" node=de-fra-1 … reason=unused action="a \"b\" c"`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"time", "level", "msg", "node", "reason", "action"}; !slices.Equal(keys, want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
	if got["msg"] != "closing route" || got["action"] != `a "b" c` || got["reason"] != "unused" {
		t.Errorf("pairs %q", got)
	}
	want, wantKeys, _ := logfmt(`level=WARN msg="closing route" time=x …`)
	if !matches(want, got, wantKeys) {
		t.Error("a sample with a variable key's other value does not match")
	}
	want["node"], wantKeys = "de-ber-2", append(wantKeys, "node")
	if matches(want, got, wantKeys) {
		t.Error("a sample with another node matches")
	}
	for _, bad := range []string{`level=INFO msg="open`, `just words`} {
		if _, _, err := logfmt(bad); err == nil {
			t.Errorf("logfmt(%q): no error", bad)
		}
	}
}

func TestCutLabel(t *testing.T) {
	for _, c := range []struct{ in, label, rest string }{
		{`platform | level=WARN msg=notice`, "platform", "level=WARN msg=notice"},
		{`agent    | time=x level=INFO`, "agent", "time=x level=INFO"},
		{`level=WARN msg="a | b"`, "", `level=WARN msg="a | b"`},
		{`{"admit": false}`, "", `{"admit": false}`},
	} {
		if label, rest := cutLabel(c.in); label != c.label || rest != c.rest {
			t.Errorf("cutLabel(%q) = %q, %q; want %q, %q", c.in, label, rest, c.label, c.rest)
		}
	}
}

// TestReadmeTestCommand: the README's test command is the one .ci/run
// runs, flags and all, so a newcomer's run is CI's (with Go's default
// 10-minute timeout the slow suites could fail a run CI passes).
func TestReadmeTestCommand(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	_, tests, _ := strings.Cut(string(readme), "\n## Tests\n")
	var cmd string
	for l := range strings.SplitSeq(tests, "\n") {
		if strings.HasPrefix(l, "go test ") {
			cmd, _, _ = strings.Cut(l, "#")
			cmd = strings.TrimSpace(cmd)
			break
		}
	}
	if cmd == "" {
		t.Fatal("README.md: no go test line under ## Tests")
	}
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(cmd) + `( \|\||$)`).Match(ci) {
		t.Errorf("README.md's test command %q is not a line of .ci/run", cmd)
	}
}
