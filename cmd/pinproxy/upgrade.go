//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/proofkit/nodekit/internal/sdnotify"
	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/handover"
)

// Upgrades (see package pinproxy's Handoff and package handover): on
// SIGUSR2 the process starts the binary now at its own path with the same
// arguments and environment, and hands it its listeners and connections
// over a socket pair the child inherits, named in handoffEnv; with
// -upgrade-socket PATH, a process that connects to PATH takes them the
// same way, and a process starting with -upgrade-socket PATH first tries
// to take them from whoever listens there. Either end admits only a
// process of the same user whose binary is in the same directory.

// upgradeSignal asks for an upgrade.
var upgradeSignal os.Signal = syscall.SIGUSR2

// peerPolicy admits, at either end of -upgrade-socket, a process of this
// user whose binary is in the directory this one's is in.
func peerPolicy() handover.Policy {
	exe, err := os.Executable()
	if err != nil {
		return handover.Policy{}
	}
	return handover.Policy{Dir: filepath.Dir(exe)}
}

// handoffSource returns the peer to adopt from, or nil to start fresh:
// the socket a parent passed, or -upgrade-socket if a process listens
// there.
func handoffSource(o options, lookupEnv func(string) (string, bool)) (*handover.Peer, error) {
	if v, ok := lookupEnv(handoffEnv); ok && v != "" {
		return handover.Inherited(handoffEnv)
	}
	if o.upgradeSocket == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.upgradeTimeout)
	defer cancel()
	peer, err := handover.Dial(ctx, o.upgradeSocket, peerPolicy())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // nobody to take over from
	}
	if err != nil {
		return nil, fmt.Errorf("-upgrade-socket: %w", err)
	}
	return peer, nil
}

// listenUpgrades listens on -upgrade-socket, if given, and sends each
// process that connects, and is admitted, to reqs.
func listenUpgrades(path string, reqs chan<- *handover.Peer, log *slog.Logger) (stop func()) {
	if path == "" {
		return func() {}
	}
	s, err := handover.Listen(path, peerPolicy())
	if err != nil {
		log.Error("cannot listen for upgrades; SIGUSR2 still works", "upgrade_socket", path, "err", err)
		return func() {}
	}
	go func() {
		for {
			peer, err := s.Accept()
			if errors.Is(err, handover.ErrPeer) {
				log.Warn("upgrade socket: refused a process", "upgrade_socket", path, "err", err)
				continue
			}
			if err != nil {
				return
			}
			reqs <- peer
		}
	}()
	return func() { s.Close() }
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

// notifyMainPID tells systemd, if it asked (NOTIFY_SOCKET), that the new
// process pid is the service's main process: sent by the old process once
// the new one serves, before it exits, so that the service never goes
// without one (the new process says so again with READY=1).
func notifyMainPID(lookupEnv func(string) (string, bool), pid int, log *slog.Logger) {
	if lookupEnv == nil || pid <= 0 {
		return
	}
	if sock, ok := lookupEnv("NOTIFY_SOCKET"); ok && sock != "" {
		if err := sdnotify.Notify(sock, "MAINPID="+strconv.Itoa(pid)); err != nil {
			log.Warn("cannot notify systemd", "err", err)
		}
	}
}

// upgradeByExec starts the binary at this process's path with its
// arguments and environment, and hands p's listeners and connections,
// and extra (the admin listener), to it. It reports what was handed
// over; if not committed, p serves on and the child is gone.
//
// The child starts with SIGHUP ignored, and its runtime keeps it so
// until its main asks for it (signal.Notify): a SIGHUP sent to every
// process of the name (`pkill -HUP pinproxy`, to reload the upstreams
// file) while the child is between its fork and its exec, or before its
// main runs, would kill it otherwise. Blocking SIGHUP, as handover.Exec
// blocks SIGUSR2, would not do: the runtime unblocks SIGHUP as it
// starts, before main, and a blocked SIGHUP would kill it then (SIGHUP
// kills a Go program that does not ask for it; SIGUSR2 is merely
// queued). A disposition survives exec only if ignored, and Go's fork
// keeps it only if the parent ignores the signal itself, so this process
// ignores SIGHUP while it starts the child (the fork and the exec, a
// millisecond or two) and asks for it again on sigs; a SIGHUP sent to it
// in that moment is lost, and the child reads the file as it starts.
func upgradeByExec(p *pinproxy.Proxy, timeout time.Duration, extra []net.Listener, sigs chan<- os.Signal, log *slog.Logger) pinproxy.HandoffResult {
	signal.Ignore(syscall.SIGHUP)
	peer, err := handover.Exec(handoffEnv)
	signal.Notify(sigs, syscall.SIGHUP)
	if err != nil {
		log.Error("upgrade failed: cannot start the new binary; serving on", "err", err)
		return pinproxy.HandoffResult{}
	}
	log.Info("upgrade: new binary started; handing over", "pid", peer.PID(), "timeout", timeout)
	ctx, cancel := context.WithTimeoutCause(context.Background(), timeout,
		fmt.Errorf("the new process was not ready within -upgrade-timeout %v", timeout))
	defer cancel()
	res, _ := p.Handoff(ctx, peer, extra...) // it logs the outcome and why, and kills a child that did not take over
	return res
}
