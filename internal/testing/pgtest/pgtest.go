// Package pgtest runs a throwaway PostgreSQL cluster for tests: initdb
// into a temporary directory, as a user other than root (PostgreSQL
// refuses to run as root), served on a Unix socket in that directory and
// on a loopback port, stopped and removed afterwards.
//
// A package's TestMain starts one cluster for all its tests:
//
//	var cluster *pgtest.Cluster
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &cluster)) }
//
//	func TestSomething(t *testing.T) {
//		url := pgtest.Need(t, cluster).NewDatabase(t)
//		…
//	}
//
// Without PostgreSQL installed the tests that need it skip with a
// one-line reason. The binaries are looked for in $NODEKIT_PG_BIN, else
// in Debian's /usr/lib/postgresql/*/bin; run as root, the cluster runs as
// $NODEKIT_PG_USER, else "postgres" (Debian's package creates it), else
// "nobody".
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a running throwaway cluster.
type Cluster struct {
	// Port is the loopback TCP port; Socket the Unix socket directory.
	Port   int
	Socket string

	dir, data, bin string
	as             []string // runuser prefix, empty when not root
	settings       []string // name=value, each given to the server as -c
	seq            atomic.Int64
}

// commandTimeout bounds every initdb and pg_ctl run.
const commandTimeout = 2 * time.Minute

// Start makes and starts a cluster, with the server's settings given as
// name=value (shared_preload_libraries=pg_stat_statements, say); its
// defaults otherwise. Its error says why there is none (no PostgreSQL
// installed, no user to run it as, a failed start).
func Start(settings ...string) (*Cluster, error) {
	for _, s := range settings {
		if name, _, ok := strings.Cut(s, "="); !ok || name == "" || strings.ContainsAny(s, " '\"\\") {
			return nil, fmt.Errorf("pgtest: setting %q: want name=value, without spaces or quotes", s)
		}
	}
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, settings: settings}
	if os.Geteuid() == 0 {
		name, err := runAs()
		if err != nil {
			return nil, err
		}
		c.as = []string{"runuser", "-u", name, "--"}
	}
	if err := c.makeDirs("nk-pg-"); err != nil {
		return nil, err
	}
	if err := c.run("initdb", "-D", c.data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"); err != nil {
		c.remove()
		return nil, err
	}
	if err := c.startOnFreePort(); err != nil {
		return nil, err
	}
	return c, nil
}

// makeDirs makes the cluster's directory, named from prefix, and in it
// the socket directory, all owned by the user the server runs as; the
// data directory is left for initdb or pg_basebackup to make.
func (c *Cluster) makeDirs(prefix string) error {
	var err error
	if c.dir, err = os.MkdirTemp("", prefix); err != nil {
		return err
	}
	c.data, c.Socket = filepath.Join(c.dir, "data"), filepath.Join(c.dir, "sock")
	if err := os.Mkdir(c.Socket, 0o700); err != nil {
		c.remove()
		return err
	}
	if len(c.as) > 0 {
		if err := chownTo(c.dir, c.as[2]); err != nil {
			c.remove()
			return err
		}
	}
	return nil
}

// startOnFreePort starts the server on a free port; on failure it
// removes the cluster's directory.
func (c *Cluster) startOnFreePort() error {
	var err error
	if c.Port, err = freePort(); err == nil {
		err = c.pgctl("start")
	}
	if err != nil {
		c.remove()
	}
	return err
}

func findBin() (string, error) {
	if d := os.Getenv("NODEKIT_PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			return "", fmt.Errorf("no PostgreSQL: $NODEKIT_PG_BIN: %w", err)
		}
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL: no initdb in /usr/lib/postgresql/*/bin (install Debian's postgresql)")
}

func version(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}

func runAs() (string, error) {
	names := []string{"postgres", "nobody"}
	if n := os.Getenv("NODEKIT_PG_USER"); n != "" {
		names = []string{n}
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		return "", errors.New("no PostgreSQL: running as root and no runuser to run it as another user")
	}
	for _, n := range names {
		if _, err := user.Lookup(n); err == nil {
			return n, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL: running as root and none of the users %q exists to run it", names)
}

func chownTo(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	})
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) run(name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	argv := append(append(slices.Clone(c.as), filepath.Join(c.bin, name)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

func (c *Cluster) pgctl(action string, extra ...string) error {
	opts := fmt.Sprintf("-k %s -p %d -c listen_addresses=127.0.0.1 -c max_connections=200", c.Socket, c.Port)
	for _, s := range c.settings {
		opts += " -c " + s
	}
	args := append([]string{"-D", c.data, "-l", filepath.Join(c.dir, "log"), "-w", "-t", "60", "-o", opts}, extra...)
	return c.run("pg_ctl", append(args, action)...)
}

// URL is the cluster's URL for database name, over the loopback port.
func (c *Cluster) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, name)
}

// NewDatabase creates a fresh database and returns its URL.
func (c *Cluster) NewDatabase(t testing.TB) string {
	t.Helper()
	url, err := c.CreateDatabase()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return url
}

// CreateDatabase creates a fresh database and returns its URL.
func (c *Cluster) CreateDatabase() (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), c.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return c.URL(name), nil
}

// Restart restarts the cluster (pg_ctl restart -m fast): every
// connection is cut, and the server is back when it returns.
func (c *Cluster) Restart() error { return c.pgctl("restart", "-m", "fast") }

// ServerPID is the postmaster's process ID (the first line of its
// postmaster.pid), for measuring the server's CPU.
func (c *Cluster) ServerPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return strconv.Atoi(string(bytes.TrimSpace(line)))
}

// Log is the server's log so far.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "log"))
	return string(b)
}

// Stop stops the cluster and removes its directory.
func (c *Cluster) Stop() error {
	err := c.run("pg_ctl", "-D", c.data, "-w", "-t", "60", "-m", "fast", "stop")
	c.remove()
	return err
}

func (c *Cluster) remove() { os.RemoveAll(c.dir) }

// Main starts a cluster into *c, runs the tests and stops it. Without a
// cluster it prints why, leaves *c nil and runs the tests, which skip
// through Need.
func Main(m *testing.M, c **Cluster) int {
	cl, err := Start()
	if err != nil {
		fmt.Printf("pgtest: %v\n", err)
		reason = err.Error()
		return m.Run()
	}
	*c = cl
	code := m.Run()
	if err := cl.Stop(); err != nil {
		fmt.Printf("pgtest: stop: %v\n", err)
	}
	return code
}

var reason = "no cluster started (pgtest.Main not called)"

// Need returns c, or skips the test with the reason there is no cluster.
func Need(t testing.TB, c *Cluster) *Cluster {
	t.Helper()
	if c == nil {
		t.Skip("pgtest: " + reason)
	}
	return c
}
