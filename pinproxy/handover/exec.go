package handover

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// Re-exec and inheritance: the old process starts the binary now at its
// own path, with its own arguments and environment, and passes it one
// end of a socket pair as descriptor 3, named in the environment; the new
// process finds it there (Inherited) and adopts from it.

// inheritedFD is the descriptor the new process inherits the socket as:
// the first after stdin, stdout and stderr.
const inheritedFD = 3

// Exec starts this process's executable again (os.Executable: after a
// package upgrade, the new file at the same path) with the same
// arguments and environment, and envVar set to the descriptor of the
// hand-over socket it inherits. It returns the new process as a Peer for
// Handoff, which kills it if it does not take over.
//
// On Linux the new process starts with SIGUSR2 blocked, so that the
// signal that upgrades a server, sent again to every process of its name
// during the hand-over, cannot kill it before its runtime catches it: a
// Go program's os/signal.Notify for SIGUSR2 unblocks it, and one sent
// earlier is delivered then. Blocking does not protect it from a signal
// that ends a Go program that has not asked for it (SIGHUP, SIGINT,
// SIGTERM): the runtime unblocks those as it starts, before main, and
// one blocked since the fork is delivered then. Only a signal ignored at
// the exec stays ignored until the program asks for it, and the fork
// keeps it ignored only if this process ignores it: a program whose
// operators send SIGHUP to every process of its name ignores SIGHUP
// around Exec (signal.Ignore, then signal.Notify again), as
// cmd/pinproxy does.
func Exec(envVar string) (*Peer, error) { return execEnv(stdEnv, envVar) }

func execEnv(e *env, envVar string) (*Peer, error) {
	if envVar == "" || strings.Contains(envVar, "=") {
		return nil, fmt.Errorf("handover: exec: environment variable name %q", envVar)
	}
	exe, err := e.executable()
	if err != nil {
		return nil, fmt.Errorf("handover: exec: finding this process's binary: %w", err)
	}
	mine, theirs, err := socketPair()
	if err != nil {
		return nil, fmt.Errorf("handover: exec: %w", err)
	}
	defer theirs.Close()
	var environ []string
	for _, kv := range e.environ() {
		if !strings.HasPrefix(kv, envVar+"=") {
			environ = append(environ, kv)
		}
	}
	environ = append(environ, envVar+"="+strconv.Itoa(inheritedFD))
	proc, err := e.start(exe, e.args(), environ, []*os.File{theirs})
	if err != nil {
		mine.Close()
		return nil, fmt.Errorf("handover: exec: starting %s: %w", exe, err)
	}
	return &Peer{conn: mine, proc: proc, env: e}, nil
}

// Inherited returns the hand-over socket a parent passed in envVar (see
// Exec), or nil, nil when the variable is not set: nothing to adopt.
func Inherited(envVar string) (*Peer, error) { return inheritedEnv(stdEnv, envVar) }

func inheritedEnv(e *env, envVar string) (*Peer, error) {
	v := e.getenv(envVar)
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 0 {
		return nil, fmt.Errorf("handover: %s=%q: want a descriptor number", envVar, v)
	}
	f := e.newFile(uintptr(fd), "handover")
	if f == nil {
		return nil, fmt.Errorf("handover: %s=%d: not an open descriptor", envVar, fd)
	}
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("handover: %s=%d: %w", envVar, fd, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("handover: %s=%d: %w", envVar, fd, errNotUnix)
	}
	return &Peer{conn: uc, env: e}, nil
}

var errNotUnix = errors.New("not a Unix socket")
