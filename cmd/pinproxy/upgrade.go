//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/proofkit/nodekit/internal/sdnotify"
	"github.com/proofkit/nodekit/pinproxy"
)

// Upgrades (see package pinproxy's Handoff): on SIGUSR2 the process
// starts the binary now at its own path with the same arguments and
// environment, and hands it its listeners and connections over a socket
// pair the child inherits as handoffFD; with -upgrade-socket PATH, a
// process that connects to PATH takes them the same way, and a process
// starting with -upgrade-socket PATH first tries to take them from
// whoever listens there.

// upgradeSignal asks for an upgrade.
var upgradeSignal os.Signal = syscall.SIGUSR2

// handoffEnv names the descriptor a child started for an upgrade takes
// the hand-over from.
const handoffEnv = "PINPROXY_HANDOFF_FD"

// handoffFD is that descriptor in the child: the first of ExtraFiles.
const handoffFD = 3

// handoffSource returns the socket to adopt from, or nil to start fresh:
// the descriptor a parent passed, or -upgrade-socket if a process listens
// there.
func handoffSource(o options, lookupEnv func(string) (string, bool)) (*net.UnixConn, error) {
	if v, ok := lookupEnv(handoffEnv); ok && v != "" {
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 0 {
			return nil, fmt.Errorf("%s=%q: want a descriptor number", handoffEnv, v)
		}
		f := os.NewFile(uintptr(fd), "handoff")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s=%d: %w", handoffEnv, fd, err)
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			c.Close()
			return nil, fmt.Errorf("%s=%d: not a Unix socket", handoffEnv, fd)
		}
		return uc, nil
	}
	if o.upgradeSocket == "" {
		return nil, nil
	}
	c, err := net.DialTimeout("unixpacket", o.upgradeSocket, o.upgradeTimeout)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil // nobody to take over from
		}
		return nil, fmt.Errorf("-upgrade-socket %s: %w", o.upgradeSocket, err)
	}
	return c.(*net.UnixConn), nil
}

// listenUpgrades listens on -upgrade-socket, if given, and sends each
// process that connects to reqs.
func listenUpgrades(path string, reqs chan<- *net.UnixConn, log *slog.Logger) (stop func()) {
	if path == "" {
		return func() {}
	}
	os.Remove(path) // a stale socket, or the old process's (it listens no more)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		log.Error("cannot listen for upgrades; SIGUSR2 still works", "upgrade_socket", path, "err", err)
		return func() {}
	}
	ln.SetUnlinkOnClose(false) // the next process listens at the same path
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			reqs <- c
		}
	}()
	return func() { ln.Close() }
}

// notifyReady tells systemd, if it asked (NOTIFY_SOCKET), that the
// process serves; after an upgrade, that it is the service's main
// process now.
func notifyReady(lookupEnv func(string) (string, bool), upgraded bool, log *slog.Logger) {
	sock, ok := lookupEnv("NOTIFY_SOCKET")
	if !ok || sock == "" {
		return
	}
	state := "READY=1"
	if upgraded {
		state = "MAINPID=" + strconv.Itoa(os.Getpid()) + "\n" + state
	}
	if err := sdnotify.Notify(sock, state); err != nil {
		log.Warn("cannot notify systemd", "err", err)
	}
}

// upgradeByExec starts the binary at this process's path with its
// arguments and environment, and hands p's listeners and connections,
// and extra (the admin listener), to it. It reports whether they were
// handed over; if not, p serves on and the child is gone.
func upgradeByExec(p *pinproxy.Proxy, timeout time.Duration, extra []net.Listener, log *slog.Logger) bool {
	exe, err := os.Executable()
	if err != nil {
		log.Error("upgrade failed: cannot find this process's binary; serving on", "err", err)
		return false
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		log.Error("upgrade failed: socketpair; serving on", "err", err)
		return false
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "handoff"), os.NewFile(uintptr(fds[1]), "handoff")
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		log.Error("upgrade failed: socketpair; serving on", "err", err)
		return false
	}
	uc := c.(*net.UnixConn)
	cmd := exec.Command(exe, os.Args[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, handoffEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, handoffEnv+"="+strconv.Itoa(handoffFD))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{theirs}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		uc.Close()
		log.Error("upgrade failed: cannot start the new binary; serving on", "binary", exe, "err", err)
		return false
	}
	log.Info("upgrade: new binary started; handing over", "binary", exe, "pid", cmd.Process.Pid, "timeout", timeout)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ctx, cancelT := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the new process was not ready within -upgrade-timeout %v", timeout))
	defer cancelT()
	gone := make(chan struct{})
	go func() {
		select {
		case err := <-exited:
			if err == nil {
				err = errors.New("exit status 0")
			}
			cancel(fmt.Errorf("the new process (pid %d) exited: %v", cmd.Process.Pid, err))
			exited <- err
		case <-gone:
		}
	}()
	res, _ := p.Handoff(ctx, uc, extra...) // it logs the outcome and why
	close(gone)
	if res.Committed {
		return true // Handoff logged how many moved, and how long it took
	}
	// Not taken: make sure the child is gone, so it serves nothing.
	cmd.Process.Kill()
	<-exited
	return false
}
