//go:build !linux

package pinproxy

import "net"

// rawListener is Linux's (accept_linux.go): elsewhere Serve accepts
// net.Conns.
type rawListener struct{}

func (p *Proxy) rawListener(net.Listener, bool) *rawListener { return nil }
func (r *rawListener) accept() error                         { return nil }
func (r *rawListener) accepted() bool                        { return false }
func (r *rawListener) close()                                {}
func (r *rawListener) room() bool                            { return true }
func (p *Proxy) holdRaw(net.Listener)                        {}
func (p *Proxy) pauseAccepts(error)                          {}
