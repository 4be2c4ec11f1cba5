package handover

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pair returns the two ends of a SOCK_SEQPACKET socket pair as peers.
func pair(t *testing.T) (old, nu *Peer) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("hand-overs need Linux")
	}
	mine, theirs, err := socketPair()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.FileConn(theirs)
	theirs.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mine.Close(); c.Close() })
	return NewPeer(mine, nil), NewPeer(c.(*net.UnixConn), nil)
}

// offer is n connections over TCP socket pairs on loopback, one
// listener, and a pipe with bytes in it on the first connection.
func offer(t *testing.T, n int) *Offer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	o := &Offer{State: []byte(`{"accepted":7}`), Listeners: []Listener{{FD: fdOf(t, ln.(*net.TCPListener)), Addr: ln.Addr().String(), Name: "proxy"}}}
	for i := range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); s.Close() })
		hc := Conn{Client: fdOf(t, s.(*net.TCPConn)), Upstream: fdOf(t, c.(*net.TCPConn)), Pipes: [2]int{-1, -1},
			State: ConnState{Upstream: "up:1", Start: int64(i), Up: int64(i), Pending: [2][]byte{nil, []byte("x")}}}
		if i == 0 {
			var p [2]int
			if err := syscall.Pipe(p[:]); err != nil {
				t.Fatal(err)
			}
			syscall.Write(p[1], []byte("in the pipe"))
			t.Cleanup(func() { syscall.Close(p[0]); syscall.Close(p[1]) })
			hc.Pipes[0], hc.State.PipeBytes[0] = p[0], len("in the pipe")
		}
		o.Conns = append(o.Conns, hc)
	}
	return o
}

func fdOf(t *testing.T, c syscall.Conn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	rc.Control(func(s uintptr) { fd = int(s) })
	return fd
}

// Everything offered arrives, in order, across several batches; the
// new side starts only after the commit, and the old side learns it
// serves.
func TestHandOver(t *testing.T) {
	old, nu := pair(t)
	o := offer(t, 150) // 300 descriptors and more: two batches
	adopted := make(chan *Adoption, 1)
	started := make(chan bool, 1)
	go func() {
		a, err := Adopt(context.Background(), nu)
		if err != nil {
			t.Error(err)
			adopted <- nil
			return
		}
		adopted <- a
		if err := a.Ready(context.Background(), func() { started <- true }); err != nil {
			t.Error(err)
		}
	}()
	prepared := false
	rep, err := Handoff(context.Background(), old, Config{}, func(context.Context) (*Offer, error) {
		prepared = true
		return o, nil
	})
	if err != nil || !rep.Serving || !rep.Ready || rep.NewPID != os.Getpid() || rep.Batches != 2 || !prepared {
		t.Fatalf("Handoff: %+v, %v; want serving after 2 batches", rep, err)
	}
	a := <-adopted
	if a == nil {
		t.FailNow()
	}
	if !<-started {
		t.Fatal("start not called")
	}
	if string(a.State) != `{"accepted":7}` || len(a.Listeners) != 1 || a.Listeners[0].Name != "proxy" || len(a.Conns) != 150 || a.OldPID != os.Getpid() {
		t.Fatalf("adopted %+v", a)
	}
	for i, c := range a.Conns {
		if c.State.Start != int64(i) || string(c.State.Pending[1]) != "x" {
			t.Fatalf("connection %d: %+v, out of order or changed", i, c.State)
		}
		for _, fd := range []int{c.Client, c.Upstream} {
			if _, err := syscall.Getpeername(fd); err != nil {
				t.Fatalf("connection %d: descriptor %d is not a connected socket: %v", i, fd, err)
			}
		}
	}
	buf := make([]byte, 64)
	n, err := syscall.Read(a.Conns[0].Pipes[0], buf)
	if err != nil || string(buf[:n]) != "in the pipe" {
		t.Fatalf("the pipe handed over reads %q, %v", buf[:n], err)
	}
	for _, c := range a.Conns {
		closeFDs([]int{c.Client, c.Upstream, c.Pipes[0], c.Pipes[1]})
	}
	closeFDs([]int{a.Listeners[0].FD})
}

// newSide is a new process that follows the protocol up to a step and
// then stops there: it closes the socket, or, with hang, keeps it.
func newSide(t *testing.T, nu *Peer, upTo string, hang bool) chan error {
	done := make(chan error, 1)
	go func() {
		var a *Adoption
		var err error
		stop := func() {
			if a != nil {
				for _, c := range a.Conns {
					closeFDs([]int{c.Client, c.Upstream, c.Pipes[0], c.Pipes[1]})
				}
				for _, l := range a.Listeners {
					closeFDs([]int{l.FD})
				}
			}
			if !hang {
				nu.Close()
			}
			done <- err
		}
		if upTo == "connect" {
			stop()
			return
		}
		if a, err = Adopt(context.Background(), nu); err != nil || upTo == "adopt" {
			stop()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err = a.Ready(ctx, func() {
			if upTo == "ready" {
				t.Error("started although the old process took everything back")
			}
		})
		stop()
	}()
	return done
}

// A new process that goes away, or stops answering, at any step before it
// serves leaves the old one with everything: Handoff says so.
func TestHandoffTakesBack(t *testing.T) {
	for _, tt := range []struct {
		upTo string
		hang bool
		want string
	}{
		{"connect", false, "closed the socket|broken pipe"},
		{"connect", true, "stalled: it did not send its request"},
		{"adopt", false, "report ready: handover: the other process closed the socket"},
	} {
		t.Run(tt.upTo, func(t *testing.T) {
			old, nu := pair(t)
			done := newSide(t, nu, tt.upTo, tt.hang)
			prepared := false
			rep, err := Handoff(context.Background(), old, Config{Stall: 200 * time.Millisecond}, func(context.Context) (*Offer, error) {
				prepared = true
				return offer(t, 3), nil
			})
			if err == nil || rep.Serving || !regexp.MustCompile(tt.want).MatchString(err.Error()) {
				t.Fatalf("Handoff: %+v, %v; want an error saying %q", rep, err, tt.want)
			}
			if tt.upTo == "connect" && prepared {
				t.Error("prepared (paused everything) for a peer that never asked")
			}
			if tt.hang && !errors.Is(err, ErrStalled) {
				t.Errorf("error %v, want ErrStalled", err)
			}
			<-done
		})
	}
}

// The old process gives up waiting for "ready" when its ctx ends; the
// new process's Ready then fails, and it starts nothing.
func TestReadyTooLate(t *testing.T) {
	old, nu := pair(t)
	adopted := make(chan *Adoption, 1)
	go func() {
		a, err := Adopt(context.Background(), nu)
		if err != nil {
			t.Error(err)
		}
		adopted <- a
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	rep, err := Handoff(ctx, old, Config{}, func(context.Context) (*Offer, error) { return offer(t, 2), nil })
	if err == nil || rep.Serving || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Handoff: %+v, %v; want the ctx's deadline", rep, err)
	}
	a := <-adopted
	err = a.Ready(context.Background(), func() { t.Error("started without a commit") })
	if !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("Ready: %v, want ErrNotCommitted", err)
	}
}

// A "serving" that comes after the old process stopped waiting (its
// Stall, or its ctx, ran out) cannot reach it, and the old process says
// it took everything back: the new process starts nothing; the old one
// has everything.
func TestServingTooLate(t *testing.T) {
	for _, byCtx := range []bool{false, true} {
		old, nu := pair(t)
		late := make(chan error, 1)
		taken := make(chan byte, 1)
		go func() {
			a, err := Adopt(context.Background(), nu)
			if err != nil {
				late <- err
				return
			}
			// As Ready does, with a pause between the commit and "serving".
			uc := a.peer.conn
			b, _ := encodeMsg(msgReady, wirePID{PID: 1})
			sendMsg(uc, b, nil)
			recvMsg(uc, msgCommit, &struct{}{})
			time.Sleep(300 * time.Millisecond)
			b, _ = encodeMsg(msgServing, struct{}{})
			late <- sendMsg(uc, b, nil)
			if m, _, err := recvRaw(uc); err == nil {
				taken <- m[0]
			}
			close(taken)
		}()
		cfg, ctx := Config{Stall: 100 * time.Millisecond}, context.Background()
		if byCtx {
			var cancel context.CancelFunc
			cfg.Stall = 10 * time.Second
			ctx, cancel = context.WithTimeout(ctx, 150*time.Millisecond)
			defer cancel()
		}
		rep, err := Handoff(ctx, old, cfg, func(context.Context) (*Offer, error) { return offer(t, 2), nil })
		if err == nil || rep.Serving || !rep.Ready {
			t.Fatalf("Handoff: %+v, %v; want ready, then given up, not serving", rep, err)
		}
		if err := <-late; err == nil {
			t.Fatal("the late \"serving\" was sent: the new process would serve what the old one took back")
		}
		if k := <-taken; k != msgTaken {
			t.Errorf("after its late \"serving\" the new process read %q, want %q (taken back)", k, msgTaken)
		}
	}
}

// Exec starts this process's binary with its arguments, its environment
// (the variable set to the inherited descriptor, once), and the socket's
// other end as descriptor 3; Inherited finds it there.
func TestExecAndInherit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("hand-overs need Linux")
	}
	var got struct {
		path          string
		args, environ []string
		files         []*os.File
	}
	e := *stdEnv
	e.executable = func() (string, error) { return "/usr/local/bin/server", nil }
	e.args = func() []string { return []string{"-listen", ":1"} }
	e.environ = func() []string { return []string{"A=1", "HO_FD=9", "B=2"} }
	e.start = func(path string, args, environ []string, files []*os.File) (process, error) {
		got.path, got.args, got.environ = path, args, environ
		for _, f := range files {
			fd, err := syscall.Dup(int(f.Fd()))
			if err != nil {
				t.Fatal(err)
			}
			got.files = append(got.files, os.NewFile(uintptr(fd), f.Name()))
		}
		return fakeProcess{}, nil
	}
	old, err := execEnv(&e, "HO_FD")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if got.path != "/usr/local/bin/server" || strings.Join(got.args, " ") != "-listen :1" ||
		strings.Join(got.environ, " ") != "A=1 B=2 HO_FD=3" || len(got.files) != 1 {
		t.Fatalf("started %+v", got)
	}
	child := *stdEnv
	child.getenv = func(k string) string { return map[string]string{"HO_FD": "3"}[k] }
	child.newFile = func(fd uintptr, name string) *os.File {
		if fd != 3 {
			t.Errorf("descriptor %d, want 3", fd)
		}
		return got.files[0]
	}
	nu, err := inheritedEnv(&child, "HO_FD")
	if err != nil || nu == nil {
		t.Fatalf("Inherited: %v, %v", nu, err)
	}
	defer nu.Close()
	nu.conn.Write([]byte("hi"))
	b := make([]byte, 8)
	if n, err := old.conn.Read(b); err != nil || string(b[:n]) != "hi" {
		t.Fatalf("the inherited socket: %q, %v", b[:n], err)
	}
	child.getenv = func(string) string { return "" }
	if p, err := inheritedEnv(&child, "HO_FD"); p != nil || err != nil {
		t.Errorf("without the variable: %v, %v; want nothing to adopt", p, err)
	}
	child.getenv = func(string) string { return "x" }
	if _, err := inheritedEnv(&child, "HO_FD"); err == nil {
		t.Error("HO_FD=x: no error")
	}
}

type fakeProcess struct{}

func (fakeProcess) Pid() int                { return 4242 }
func (fakeProcess) Kill() error             { return nil }
func (fakeProcess) Exited() <-chan struct{} { return nil }
func (fakeProcess) Err() error              { return nil }

// Policy admits the same user, and, with Dir, a binary from that
// directory, replaced or not.
func TestPolicy(t *testing.T) {
	e := *stdEnv
	e.geteuid = func() int { return 1000 }
	e.exe = func(pid int) (string, error) {
		return map[int]string{1: "/opt/s/bin/server", 2: "/opt/s/bin/server (deleted)", 3: "/tmp/server"}[pid], nil
	}
	for _, tt := range []struct {
		pol  Policy
		cred Cred
		ok   bool
	}{
		{Policy{}, Cred{PID: 1, UID: 1000}, true},
		{Policy{}, Cred{PID: 1, UID: 1001}, false},
		{Policy{}, Cred{PID: 1, UID: 0}, false},
		{Policy{Dir: "/opt/s/bin/"}, Cred{PID: 1, UID: 1000}, true},
		{Policy{Dir: "/opt/s/bin"}, Cred{PID: 2, UID: 1000}, true},
		{Policy{Dir: "/opt/s/bin"}, Cred{PID: 3, UID: 1000}, false},
	} {
		err := tt.pol.check(&e, tt.cred)
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, ErrPeer) {
			t.Errorf("%+v admits %+v: %v, want ok %v", tt.pol, tt.cred, err, tt.ok)
		}
	}
}

// The upgrade socket is made 0600 whatever the umask, in a directory only
// its user can change; a peer of another user is refused at either end.
func TestSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("hand-overs need Linux")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "upgrade.sock")
	if _, err := Dial(context.Background(), path, Policy{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Dial with nobody listening: %v, want fs.ErrNotExist", err)
	}
	// A directory that is not there is a wrong path, not nobody
	// listening: a process started with it would serve on unable to
	// take over or be taken over.
	for _, f := range []func(string) error{
		func(p string) error { _, err := Dial(context.Background(), p, Policy{}); return err },
		func(p string) error { _, err := Listen(p, Policy{}); return err },
	} {
		missing := filepath.Join(dir, "none", "upgrade.sock")
		if err := f(missing); err == nil || errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "its directory") {
			t.Errorf("socket in a missing directory: %v, want an error naming the directory, not fs.ErrNotExist", err)
		}
	}
	old := syscall.Umask(0)
	s, err := Listen(path, Policy{})
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, %v; want 0600 under umask 0", fi.Mode(), err)
	}
	accepted := make(chan *Peer, 1)
	go func() {
		p, err := s.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- p
	}()
	nu, err := Dial(context.Background(), path, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	nu.Close()
	if p := <-accepted; p != nil {
		p.Close()
	}

	// Another user at either end: the euid each side compares with.
	other := *stdEnv
	other.geteuid = func() int { return os.Geteuid() + 1 }
	s.env = &other
	go func() {
		_, err := s.Accept()
		if !errors.Is(err, ErrPeer) {
			t.Errorf("Accept of another user's process: %v, want ErrPeer", err)
		}
		accepted <- nil
	}()
	if c, err := net.Dial("unixpacket", path); err == nil {
		defer c.Close()
	}
	<-accepted
	if _, err := dialEnv(context.Background(), &other, path, Policy{}); !errors.Is(err, ErrPath) && !errors.Is(err, ErrPeer) {
		t.Errorf("Dial to another user's process: %v, want ErrPath or ErrPeer", err)
	}
	s.Close()

	// A socket path in a directory others can write to, or a file that
	// is not a socket, is refused.
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o1777)
	if _, err := Listen(filepath.Join(open, "upgrade.sock"), Policy{}); !errors.Is(err, ErrPath) {
		t.Errorf("Listen in a world-writable directory: %v, want ErrPath", err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := Listen(file, Policy{}); !errors.Is(err, ErrPath) {
		t.Errorf("Listen over a regular file: %v, want ErrPath", err)
	}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(t.TempDir(), "theirs")
		os.Mkdir(theirs, 0o755)
		os.Chown(theirs, 65534, 65534)
		if _, err := Listen(filepath.Join(theirs, "upgrade.sock"), Policy{}); !errors.Is(err, ErrPath) {
			t.Errorf("Listen in another user's directory: %v, want ErrPath", err)
		}
	}
	// This user's own old socket is replaced.
	s2, err := Listen(path, Policy{})
	if err != nil {
		t.Fatalf("Listen over its own old socket: %v", err)
	}
	s2.Close()
}

// oldSide is an old process that commits and then, instead of waiting
// for "serving", dies (closes its socket at once) or gives up.
func oldSide(t *testing.T, old *Peer, dies bool) {
	t.Helper()
	h := &handing{peer: old, stall: time.Second, ctx: context.Background(), msgs: make(chan inMsg, 1), quit: make(chan struct{})}
	go h.read()
	defer close(h.quit)
	b, _ := encodeMsg(msgVersion, wireVersion{Version: Version})
	h.write(b, nil)
	if err := h.next(msgRequest, &wireRequest{}, time.Second, "ask"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.send(&Offer{State: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []byte{msgHave, msgReady} {
		if err := h.next(k, &wirePID{}, time.Second, "answer"); err != nil {
			t.Fatal(err)
		}
	}
	b, _ = encodeMsg(msgCommit, struct{}{})
	if !dies {
		old.conn.CloseRead() // as Handoff gives up: after the commit, before "serving"
		h.write(b, nil)
		b, _ = encodeMsg(msgTaken, struct{}{})
	}
	h.write(b, nil)
	old.Close()
}

// An old process that dies after its commit leaves everything to the new
// one, which serves; one that gives up after its commit keeps it all.
func TestOldGoneAfterCommit(t *testing.T) {
	for _, dies := range []bool{true, false} {
		old, nu := pair(t)
		ready := make(chan error, 1)
		started := false
		go func() {
			a, err := Adopt(context.Background(), nu)
			if err == nil {
				err = a.Ready(context.Background(), func() { started = true })
			}
			ready <- err
		}()
		oldSide(t, old, dies)
		err := <-ready
		switch {
		case dies && (err != nil || !started):
			t.Errorf("the old process died after its commit: Ready %v, started %v; want it serving", err, started)
		case !dies && (!errors.Is(err, ErrNotCommitted) || started):
			t.Errorf("the old process took everything back: Ready %v, started %v; want ErrNotCommitted, nothing started", err, started)
		}
	}
}

// A new process takes over from an old one of version 1 (pinproxy
// 0.1.0): hello first, flagged listeners, commit at once, then "ready".
func TestAdoptFromVersion1(t *testing.T) {
	old, nu := pair(t)
	o := offer(t, 3)
	done := make(chan error, 1)
	go func() { // the old process, as version 1 spoke
		uc := old.conn
		send := func(msg string, fds []int) {
			if err := sendMsg(uc, []byte(msg), fds); err != nil {
				done <- err
			}
		}
		send(`H{"version":1,"pid":77,"listeners":1,"conns":3,"totals":{"accepted":9},"upstreams":[{"addr":"up:1","state":1}]}`, nil)
		fds := []int{o.Listeners[0].FD}
		var conns []string
		for _, c := range o.Conns {
			fds = append(fds, c.Client, c.Upstream)
			if c.State.PipeBytes[0] > 0 {
				fds = append(fds, c.Pipes[0])
			}
			b, _ := json.Marshal(c.State)
			conns = append(conns, string(b))
		}
		send(`B{"listeners":[{"addr":"127.0.0.1:1","preset":true}],"conns":[`+strings.Join(conns, ",")+`]}`, fds)
		send(`E{"listeners":1,"conns":3}`, nil)
		if _, err := recvMsg(uc, msgHave, &struct{}{}); err != nil {
			done <- err
			return
		}
		send(`C{}`, nil)
		var r wirePID
		_, err := recvMsg(uc, msgReady, &r)
		done <- err
	}()
	a, err := Adopt(context.Background(), nu)
	if err != nil {
		t.Fatal(err)
	}
	if a.OldPID != 77 || len(a.Conns) != 3 || a.Listeners[0].Name != "proxy+keepalive" || !strings.Contains(string(a.State), `"accepted":9`) {
		t.Fatalf("adopted from version 1: %+v", a)
	}
	started := false
	if err := a.Ready(context.Background(), func() { started = true }); err != nil || !started {
		t.Fatalf("Ready: %v, started %v", err, started)
	}
	if err := <-done; err != nil {
		t.Fatalf("the version 1 side: %v", err)
	}
	for _, c := range a.Conns {
		closeFDs([]int{c.Client, c.Upstream, c.Pipes[0], c.Pipes[1]})
	}
	closeFDs([]int{a.Listeners[0].FD})
}
