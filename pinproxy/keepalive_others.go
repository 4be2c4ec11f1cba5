//go:build !linux

package pinproxy

import (
	"net"
	"syscall"
)

// listenConfig is what Listen listens with: Go sets the proxy's keepalive
// on each accepted conn, once (Serve then leaves it alone).
func (p *Proxy) listenConfig() net.ListenConfig {
	if !p.keepAlive.Enable {
		return net.ListenConfig{KeepAlive: -1}
	}
	return net.ListenConfig{KeepAliveConfig: p.keepAlive}
}

// dialControl is nil: off Linux the user timeout is not set.
func (p *Proxy) dialControl() func(network, address string, c syscall.RawConn) error { return nil }

// setUserTimeout does nothing off Linux.
func (p *Proxy) setUserTimeout(*net.TCPConn) {}
