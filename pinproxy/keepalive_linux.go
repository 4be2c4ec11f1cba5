package pinproxy

import (
	"fmt"
	"net"
	"syscall"
	"time"
)

// listenConfig is what Listen listens with. On Linux a socket accepted
// from a listening socket inherits its keepalive settings (SO_KEEPALIVE,
// TCP_KEEPIDLE, TCP_KEEPINTVL), so they are set once, on the listening
// socket, and Go is told to set none on each accepted conn (KeepAlive -1):
// no keepalive setsockopt per accepted client at all, where a plain
// net.Listen plus Serve's own settings cost 7.
func (p *Proxy) listenConfig() net.ListenConfig {
	lc := net.ListenConfig{KeepAlive: -1}
	if p.keepAlive.Enable {
		ka := p.keepAlive
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = setKeepAliveFD(int(fd), ka) }); err != nil {
				return err
			}
			return serr
		}
	}
	return lc
}

// setKeepAliveFD turns keepalive on for the socket fd with ka's idle time
// and interval (rounded up to whole seconds, as net does); the probe count
// stays the kernel's.
func setKeepAliveFD(fd int, ka net.KeepAliveConfig) error {
	opts := [...]struct {
		level, opt int
		name       string
		v          int
	}{
		{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, "SO_KEEPALIVE", 1},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, "TCP_KEEPIDLE", secondsUp(ka.Idle)},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, "TCP_KEEPINTVL", secondsUp(ka.Interval)},
	}
	for _, o := range opts {
		if err := syscall.SetsockoptInt(fd, o.level, o.opt, o.v); err != nil {
			return fmt.Errorf("pinproxy: setsockopt %s %d: %w", o.name, o.v, err)
		}
	}
	return nil
}

// secondsUp is d in whole seconds, rounded up, at least 1.
func secondsUp(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}
