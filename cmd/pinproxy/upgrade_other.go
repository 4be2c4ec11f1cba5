//go:build !linux

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/handover"
)

var upgradeSignal os.Signal // none: no SIGUSR2

func handoffSource(o options, lookupEnv func(string) (string, bool)) (*handover.Peer, error) {
	if o.upgradeSocket != "" {
		return nil, fmt.Errorf("-upgrade-socket: upgrades need Linux: %w", errors.ErrUnsupported)
	}
	return nil, nil
}

func listenUpgrades(string, chan<- *handover.Peer, *slog.Logger) func() { return func() {} }

func notifyReady(func(string) (string, bool), bool, *slog.Logger) {}

func notifyMainPID(func(string) (string, bool), int, *slog.Logger) {}

func upgradeByExec(*pinproxy.Proxy, time.Duration, []net.Listener, chan<- os.Signal, *slog.Logger) pinproxy.HandoffResult {
	return pinproxy.HandoffResult{}
}
