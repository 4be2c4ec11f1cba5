package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/pgstore"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// writeTokens writes a token file with the admin's token "tok".
func writeTokens(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBinaryKeepsDSNSecrets runs the built platform with -db values
// holding a secret in every place one goes, in both forms: against a
// real database it serves and stops, against an unreachable one and
// with values that do not parse it exits 2; its output never holds the
// secret.
func TestBinaryKeepsDSNSecrets(t *testing.T) {
	cl := pgtest.Need(t, cluster)
	bin := platformBinary(t)
	dir := t.TempDir()
	tokens := writeTokens(t, dir)
	db := strings.TrimPrefix(cl.NewDatabase(t), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/", cl.Port))
	db, _, _ = strings.Cut(db, "?")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().(*net.TCPAddr).Port // nothing listens there once closed
	ln.Close()

	// The cluster trusts loopback, so a password is taken and not
	// checked; sslmode=disable leaves sslpassword and sslkey unread.
	serving := []string{
		fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/%s?sslmode=disable&sslpassword=%[1]s&sslkey=/nonexistent/%[1]s.pem", platformtest.DSNSecret, cl.Port, db),
		fmt.Sprintf("postgresql://postgres@127.0.0.1:%d/%s?password=%s&sslmode=disable", cl.Port, db, platformtest.DSNSecret),
		fmt.Sprintf(`host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable password='%s \' x' sslpassword=%[3]s sslkey=/nonexistent/%[3]s`, cl.Port, db, platformtest.DSNSecret),
	}
	for _, dsn := range serving {
		p := testkit.StartProc(t, exec.Command(bin, "-token-file", tokens, "-listen", "127.0.0.1:0", "-db", dsn), nil)
		out := p.Log.String
		testkit.WaitFor(t, "the platform serving on -db "+pgstore.RedactDSN(dsn), func() bool { return strings.Contains(out(), "platform serving") })
		p.Cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.Done():
		case <-time.After(time.Minute):
			t.Fatalf("-db %s: still running a minute after SIGINT", pgstore.RedactDSN(dsn))
		}
		if strings.Contains(out(), platformtest.DSNSecret) {
			t.Errorf("-db %s: the output shows the secret:\n%s", pgstore.RedactDSN(dsn), out())
		}
		if !strings.Contains(out(), "xxxxx") {
			t.Errorf("-db %s: the start-up line does not show the value, masked:\n%s", pgstore.RedactDSN(dsn), out())
		}
	}

	failing := append([]string{
		fmt.Sprintf("postgres://u:%s@127.0.0.1:%d/db?sslmode=disable&sslpassword=%[1]s", platformtest.DSNSecret, closed),
		fmt.Sprintf("host=127.0.0.1 port=%d user=u password='%s' sslpassword=%[2]s sslmode=disable", closed, platformtest.DSNSecret),
		fmt.Sprintf("host=127.0.0.1 port=%d sslmode=require sslcert=/nonexistent/c.pem sslkey=/nonexistent/%s.pem", closed, platformtest.DSNSecret),
	}, platformtest.SecretDSNs...)
	for _, dsn := range failing {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		out, err := exec.CommandContext(ctx, bin, "-token-file", tokens, "-listen", "127.0.0.1:0", "-state-dir", filepath.Join(dir, "state"), "-db", dsn).CombinedOutput()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("-db %s: %v, want exit 2: %s", pgstore.RedactDSN(dsn), err, out)
		}
		if !strings.Contains(string(out), "platform: -db ") {
			t.Errorf("-db %s: the error does not name -db: %s", pgstore.RedactDSN(dsn), out)
		}
		if strings.Contains(string(out), platformtest.DSNSecret) {
			t.Errorf("-db %s: the error shows the secret: %s", pgstore.RedactDSN(dsn), out)
		}
	}
}

// TestBinaryConnectionCap runs the built platform under an open-file
// limit of 256 and holds more idle and slow-header connections than
// that: it takes no more than its cap, never runs out of descriptors,
// answers GET /healthz all the while and everything else 503, and
// serves again once they are gone.
func TestBinaryConnectionCap(t *testing.T) {
	bin := platformBinary(t)
	dir := t.TempDir()
	tokens := writeTokens(t, dir)
	addr := testkit.FreeAddr(t)
	p := testkit.StartProc(t, exec.Command("sh", "-c", `ulimit -n 256 && exec "$0" "$@"`, bin,
		"-token-file", tokens, "-listen", addr, "-state-dir", filepath.Join(dir, "state")), nil)
	out := p.Log.String
	testkit.WaitFor(t, "the platform serving", func() bool { return strings.Contains(out(), "platform serving") })
	if m := regexp.MustCompile(`max_conns=(\d+) max_conns_from="RLIMIT_NOFILE 256"`).FindStringSubmatch(out()); m == nil || m[1] != fmt.Sprint(api.MaxConnsForFiles(256)) {
		t.Fatalf("the start-up line does not say max_conns=%d from RLIMIT_NOFILE 256:\n%s", api.MaxConnsForFiles(256), out())
	}

	// Idle connections, one after another, each after one /healthz:
	// those under the cap stay open (the server keeps an idle connection
	// for a minute), those over it are answered and closed.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	idle, answeredOver := 0, 0
	for i := range 300 {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: platform\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case err != nil && (os.IsTimeout(err) || strings.Contains(err.Error(), "timeout")):
			t.Fatalf("connection %d: no answer in 10 s (out of descriptors?): %v\n%s", i, err, out())
		case err != nil: // closed at once: over the cap and its spares
		case resp.StatusCode != http.StatusOK:
			t.Fatalf("connection %d: /healthz answered %s", i, resp.Status)
		case resp.Close:
			answeredOver++
		default:
			idle++
		}
		if resp != nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		c.SetDeadline(time.Time{})
	}
	if want := api.MaxConnsForFiles(256); idle != want || answeredOver != 300-want {
		t.Errorf("%d connections kept idle, %d answered and closed; want %d and %d", idle, answeredOver, want, 300-want)
	}
	// Slow headers on top: each holds a place for seconds at most.
	for range 100 {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: platform\r\n")
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string, error) {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	testkit.WaitFor(t, "GET /healthz answered 200 at the cap", func() bool {
		code, _, err := get("/healthz")
		return err == nil && code == http.StatusOK
	})
	var body string
	testkit.WaitFor(t, "GET /nodes answered 503 at the cap", func() bool {
		code, b, err := get("/nodes")
		body = b
		return err == nil && code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "connection cap") || !strings.Contains(body, `"reason":"unavailable"`) {
		t.Errorf("GET /nodes at the cap: %s, want the cap named", body)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	testkit.WaitFor(t, "GET /nodes answered 200 once the connections closed", func() bool {
		code, _, err := get("/nodes")
		return err == nil && code == http.StatusOK
	})
	if strings.Contains(out(), "too many open files") {
		t.Errorf("the platform ran out of descriptors:\n%s", out())
	}
}

// TestBinaryVersion: -version prints the build and exits 0, without a
// token file.
func TestBinaryVersion(t *testing.T) {
	out, err := exec.Command(platformBinary(t), "-version").CombinedOutput()
	if err != nil || !regexp.MustCompile(`^proofkit-platform \S+ \(commit \S+, go\S+\)\n$`).Match(out) {
		t.Fatalf("-version: %v, output %q", err, out)
	}
}

// TestBinaryHealthcheck: -healthcheck (a container's HEALTHCHECK, with
// no token file) exits 0 against a platform serving at -listen, and 1
// with a line saying why when nothing serves there.
func TestBinaryHealthcheck(t *testing.T) {
	bin := platformBinary(t)
	dir := t.TempDir()
	addr := testkit.FreeAddr(t)
	p := testkit.StartProc(t, exec.Command(bin, "-token-file", writeTokens(t, dir), "-listen", addr, "-state-dir", dir), nil)
	testkit.WaitFor(t, "the platform serving", func() bool { return strings.Contains(p.Log.String(), "platform serving") })
	if out, err := exec.Command(bin, "-healthcheck", "-listen", addr).CombinedOutput(); err != nil {
		t.Errorf("-healthcheck against a running platform: %v %q", err, out)
	}
	p.Kill()
	out, err := exec.Command(bin, "-healthcheck", "-listen", addr).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.HasPrefix(string(out), "platform: healthcheck: ") {
		t.Errorf("-healthcheck with no platform: %v %q, want exit 1 and a line saying why", err, out)
	}
}

// TestBinaryConfigFiles: the token, notify and route table files are
// regular files of bounded size. A FIFO as -token-file, -notify-file or
// -routes and /dev/zero as -notify-file or -routes end start-up at once
// with exit 2 naming the file; a notify
// file replaced by a FIFO and reloaded on SIGHUP is refused, the old one
// kept, and SIGTERM still stops the platform.
func TestBinaryConfigFiles(t *testing.T) {
	bin := platformBinary(t)
	dir := t.TempDir()
	tokens := writeTokens(t, dir)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	for _, tt := range []struct {
		args []string
		says string
	}{
		{[]string{"-token-file", fifo}, "-token-file " + fifo + ": " + fifo + " is a named pipe (FIFO), not a regular file"},
		{[]string{"-token-file", tokens, "-notify-file", fifo}, "-notify-file: " + fifo + " is a named pipe (FIFO), not a regular file"},
		{[]string{"-token-file", tokens, "-notify-file", "/dev/zero"}, "-notify-file: /dev/zero is a character device, not a regular file"},
		{[]string{"-token-file", tokens, "-routes", fifo}, "route table: " + fifo + " is a named pipe (FIFO), not a regular file"},
		{[]string{"-token-file", tokens, "-routes", "/dev/zero"}, "route table: /dev/zero is a character device, not a regular file"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, append(tt.args, "-listen", "127.0.0.1:0", "-state-dir", state)...).CombinedOutput()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tt.says) {
			t.Errorf("%v: %v, output %q; want exit 2 saying %q", tt.args, err, out, tt.says)
		}
	}

	notify := filepath.Join(dir, "notify")
	if err := os.WriteFile(notify, []byte("* http://127.0.0.1:1/hook "+platformtest.HookSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testkit.StartProc(t, exec.Command(bin, "-token-file", tokens, "-notify-file", notify, "-listen", "127.0.0.1:0", "-state-dir", state), nil)
	out := p.Log.String
	testkit.WaitFor(t, "the platform serving", func() bool { return strings.Contains(out(), "platform serving") })
	if err := os.Remove(notify); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(notify, 0o600); err != nil {
		t.Fatal(err)
	}
	p.Cmd.Process.Signal(syscall.SIGHUP)
	testkit.WaitFor(t, "the FIFO refused on SIGHUP", func() bool { return strings.Contains(out(), "notify file not reloaded") })
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after SIGTERM:\n%s", out())
	}
	if !strings.Contains(out(), "named pipe (FIFO)") {
		t.Errorf("the refusal does not say why:\n%s", out())
	}
}

// TestBinaryReloadsTokens: on SIGHUP the built platform reads its token
// file again: an operator's line added is taken at once, one taken out
// is refused (its dashboard session with it), an agent's line naming a
// node's operator moves the node to them; a file replaced by a FIFO is
// refused naming the flag and the path, the one in force kept, and
// SIGTERM still stops the platform.
func TestBinaryReloadsTokens(t *testing.T) {
	bin := platformBinary(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(tokens+".new", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tokens+".new", tokens); err != nil {
			t.Fatal(err)
		}
	}
	write("tok\nbob-tok operator:bob\n")
	addr := testkit.FreeAddr(t)
	p := testkit.StartProc(t, exec.Command(bin, "-token-file", tokens, "-listen", addr, "-state-dir", filepath.Join(dir, "state")), nil)
	out := p.Log.String
	testkit.WaitFor(t, "the platform serving", func() bool { return strings.Contains(out(), "platform serving") })
	get := func(path, token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// The admin's reading makes node d1, nobody's yet.
	body := fmt.Sprintf(`{"v":1,"node":"d1","at":%q,"memory_used_percent":10,"cpus":4,"conntrack_max":262144}`, time.Now().UTC().Format(time.RFC3339Nano))
	req, _ := http.NewRequest("POST", "http://"+addr+"/report", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the admin's reading: %v %v", resp, err)
	}
	login := func(token string) *http.Cookie {
		t.Helper()
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.PostForm("http://"+addr+"/login", map[string][]string{"token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
			t.Fatalf("login: %s", resp.Status)
		}
		return resp.Cookies()[0]
	}
	page := func(c *http.Cookie) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		req.AddCookie(c)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	bobSession := login("bob-tok")
	hup := func(says string) {
		t.Helper()
		n := strings.Count(out(), says)
		p.Cmd.Process.Signal(syscall.SIGHUP)
		testkit.WaitFor(t, says, func() bool { return strings.Count(out(), says) > n })
	}
	if got := get("/nodes/d1", "alice-tok"); got != 401 {
		t.Fatalf("alice before her line: %d, want 401", got)
	}
	write("tok\nalice-tok operator:alice\nd1-tok d1 operator:alice\n")
	hup("token file reloaded")
	if got := get("/nodes/d1", "alice-tok"); got != 200 {
		t.Errorf("alice's node after her lines were added and SIGHUP: %d, want 200", got)
	}
	if got := get("/nodes", "bob-tok"); got != 401 {
		t.Errorf("bob's token after his line was taken out and SIGHUP: %d, want 401", got)
	}
	if got := page(bobSession); got != 401 {
		t.Errorf("bob's dashboard session after his line was taken out: %d, want 401", got)
	}
	if err := os.Remove(tokens); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(tokens, 0o600); err != nil {
		t.Fatal(err)
	}
	hup("token file not reloaded")
	if want := "-token-file " + tokens + ": " + tokens + " is a named pipe (FIFO), not a regular file"; !strings.Contains(out(), want) {
		t.Errorf("the refusal does not say %q:\n%s", want, out())
	}
	if got := get("/nodes/d1", "alice-tok"); got != 200 {
		t.Errorf("alice's token after a refused reload: %d, want 200 (the file in force kept)", got)
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after SIGTERM:\n%s", out())
	}
}
