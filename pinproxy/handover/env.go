package handover

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// env is every process operation the package makes, so that tests can
// fake them (as cloudflare/tableflip does): stdEnv is the real one.
type env struct {
	getpid     func() int
	geteuid    func() int
	executable func() (string, error)
	args       func() []string
	environ    func() []string
	getenv     func(string) string
	newFile    func(fd uintptr, name string) *os.File
	// start starts a child with files as its descriptors 3, 4, ….
	start func(path string, args, environ []string, files []*os.File) (process, error)
	// peerCred returns the credentials of the process at the other end
	// of a connected Unix socket (SO_PEERCRED).
	peerCred func(uc *net.UnixConn) (Cred, error)
	// exe returns the path of process pid's executable.
	exe func(pid int) (string, error)
	// watch returns process pid, not a child (one that connected to a
	// Socket), to be killed if its hand-over fails; nil if it cannot.
	watch func(pid int) (process, error)
}

// stdEnv is the operating system's: the per-OS parts are startStd,
// peerCred and exeOf (env_linux.go, env_others.go).
var stdEnv = &env{
	getpid:     os.Getpid,
	geteuid:    os.Geteuid,
	executable: os.Executable,
	args:       func() []string { return os.Args[1:] },
	environ:    os.Environ,
	getenv:     os.Getenv,
	newFile:    os.NewFile,
	start:      startStd,
	peerCred:   peerCred,
	exe:        exeOf,
	watch:      watchPeer,
}

// process is a child: the new process, to the old one that started it.
type process interface {
	Pid() int
	Kill() error
	// Exited is closed once the process has exited; Err then says how.
	Exited() <-chan struct{}
	Err() error
}

// Cred is a peer's credentials, as the kernel gives them (SO_PEERCRED).
type Cred struct {
	PID, UID, GID int
}

// Policy says which processes a hand-over socket admits, on either end.
// The zero Policy admits a process of the same effective user.
type Policy struct {
	// Dir, if not empty, is the directory the peer's executable must be
	// in (the one it was started from, even if it has been replaced
	// since, as a package upgrade does).
	Dir string
}

// ErrPeer is wrapped by the error for a peer that Policy does not admit.
var ErrPeer = errors.New("handover: peer not admitted")

// check admits the process of cred, or says why not.
func (pol Policy) check(e *env, cred Cred) error {
	if uid := e.geteuid(); cred.UID != uid {
		return fmt.Errorf("%w: pid %d runs as uid %d, this process as %d", ErrPeer, cred.PID, cred.UID, uid)
	}
	if pol.Dir == "" {
		return nil
	}
	exe, err := e.exe(cred.PID)
	if err != nil {
		return fmt.Errorf("%w: pid %d: cannot read its executable: %v", ErrPeer, cred.PID, err)
	}
	exe = strings.TrimSuffix(exe, " (deleted)") // replaced since it started
	if dir := filepath.Dir(exe); dir != filepath.Clean(pol.Dir) {
		return fmt.Errorf("%w: pid %d runs %s, not from %s", ErrPeer, cred.PID, exe, pol.Dir)
	}
	return nil
}

// childProcess is a process this one started.
type childProcess struct {
	p      *os.Process
	exited chan struct{}
	err    error // how it exited; read after exited is closed
}

func newChild(p *os.Process) *childProcess {
	c := &childProcess{p: p, exited: make(chan struct{})}
	go func() {
		st, err := p.Wait()
		switch {
		case err != nil:
			c.err = err
		case st.Success():
			c.err = errors.New("exit status 0")
		default:
			c.err = errors.New(st.String())
		}
		close(c.exited)
	}()
	return c
}

func (c *childProcess) Pid() int                { return c.p.Pid }
func (c *childProcess) Kill() error             { return c.p.Kill() }
func (c *childProcess) Exited() <-chan struct{} { return c.exited }
func (c *childProcess) Err() error              { return c.err }

// startChild is env.start for the operating system.
func startChild(path string, args, environ []string, files []*os.File) (process, error) {
	p, err := os.StartProcess(path, append([]string{path}, args...), &os.ProcAttr{
		Env:   environ,
		Files: append([]*os.File{nil, os.Stdout, os.Stderr}, files...),
	})
	if err != nil {
		return nil, err
	}
	return newChild(p), nil
}
