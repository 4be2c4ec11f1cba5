//go:build !linux

package pinproxy

import "net"

// listenConfig is what Listen listens with: Go sets the proxy's keepalive
// on each accepted conn, once (Serve then leaves it alone).
func (p *Proxy) listenConfig() net.ListenConfig {
	if !p.keepAlive.Enable {
		return net.ListenConfig{KeepAlive: -1}
	}
	return net.ListenConfig{KeepAliveConfig: p.keepAlive}
}
