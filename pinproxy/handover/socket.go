//go:build unix

package handover

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// The upgrade socket: a Unix socket at a path, where the old process
// listens and a new one connects, instead of a parent starting its child.
// Who can reach it is decided three times: the directory it is in must
// be one only this user (or root) can change, so nobody else can put a
// socket of their own there or replace this one; the socket is made
// with mode 0600 whatever the umask; and each end checks the other's
// credentials (SO_PEERCRED) against a Policy.

// Socket listens for new processes at a path.
type Socket struct {
	ln  *net.UnixListener
	pol Policy
	env *env
}

// Listen listens at path for new processes that will take over this
// one. It refuses a path in a directory that another user, or every
// user, can write to, and a path that exists and is not a socket of
// this user's; an old socket of this user's at path (a process before
// this one's) is replaced.
func Listen(path string, pol Policy) (*Socket, error) { return listenEnv(stdEnv, path, pol) }

func listenEnv(e *env, path string, pol Policy) (*Socket, error) {
	if err := checkPath(e, path); err != nil {
		return nil, err
	}
	// Bound at a name of its own, given its mode, then renamed into
	// place: at path it is never reachable with the umask's mode.
	tmp := path + ".new" + strconv.Itoa(e.getpid())
	os.Remove(tmp)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: tmp, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("handover: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false) // the next process listens at the same path
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("handover: listen on %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("handover: listen on %s: %w", path, err)
	}
	return &Socket{ln: ln, pol: pol, env: e}, nil
}

// Accept waits for a process to connect and returns it as a Peer for
// Handoff. A process that Policy does not admit is refused (closed): the
// error wraps ErrPeer, and the socket listens on. A Handoff to the
// process that does not end with it serving kills it, as it kills a
// child: one that hangs with copies of every descriptor would otherwise
// keep each connection's sockets open after the old process closes them,
// and no FIN would reach the peers.
func (s *Socket) Accept() (*Peer, error) {
	c, err := s.ln.AcceptUnix()
	if err != nil {
		return nil, err
	}
	cred, err := s.admit(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	pe := &Peer{conn: c, env: s.env}
	if s.env.watch != nil && cred.PID != s.env.getpid() {
		if p, err := s.env.watch(cred.PID); err == nil {
			pe.proc = p
		}
	}
	return pe, nil
}

func (s *Socket) admit(c *net.UnixConn) (Cred, error) {
	cred, err := s.env.peerCred(c)
	if err != nil {
		return cred, fmt.Errorf("%w: %v", ErrPeer, err)
	}
	return cred, s.pol.check(s.env, cred)
}

// Close stops listening. The path is left for the next process.
func (s *Socket) Close() error { return s.ln.Close() }

// Dial connects to the process listening at path, and returns it as a
// Peer for Adopt. It returns an error wrapping fs.ErrNotExist when
// nobody listens there (nothing to take over), and one wrapping ErrPeer
// when the process there is not admitted by pol; the path is checked as
// Listen checks it.
func Dial(ctx context.Context, path string, pol Policy) (*Peer, error) {
	return dialEnv(ctx, stdEnv, path, pol)
}

func dialEnv(ctx context.Context, e *env, path string, pol Policy) (*Peer, error) {
	if err := checkPath(e, path); err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("handover: nobody listens at %s: %w", path, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("handover: %w", err)
	}
	uc := c.(*net.UnixConn)
	cred, err := e.peerCred(uc)
	if err == nil {
		err = pol.check(e, cred)
	} else {
		err = fmt.Errorf("%w: %v", ErrPeer, err)
	}
	if err != nil {
		uc.Close()
		return nil, err
	}
	return &Peer{conn: uc, env: e}, nil
}

// checkPath refuses a socket path that another user could have made, or
// could replace: in a directory writable by others or owned by another
// user (root aside), or an existing file that is not this user's socket.
func checkPath(e *env, path string) error {
	if path == "" {
		return errors.New("handover: no socket path")
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		// Not fs.ErrNotExist: a missing directory is a mistake in the
		// path, not "nobody listens there".
		return fmt.Errorf("handover: socket %s: its directory: %v", path, err)
	}
	uid := e.geteuid()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid && st.Uid != 0 {
		return fmt.Errorf("%w: socket %s: its directory belongs to uid %d, this process runs as %d", ErrPath, path, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: socket %s: its directory %s is writable by others (mode %04o); use one only this user can change (systemd's RuntimeDirectory=)",
			ErrPath, path, dir, fi.Mode().Perm())
	}
	li, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("handover: socket %s: %w", path, err)
	case li.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("%w: %s exists and is not a socket (%v)", ErrPath, path, li.Mode().Type())
	}
	if st, ok := li.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid {
		return fmt.Errorf("%w: socket %s belongs to uid %d, this process runs as %d", ErrPath, path, st.Uid, uid)
	}
	return nil
}

// ErrPath is wrapped by the error for a socket path that another user
// could have made or could replace.
var ErrPath = errors.New("handover: unsafe socket path")
