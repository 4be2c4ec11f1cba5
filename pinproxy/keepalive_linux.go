package pinproxy

import (
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

// keepAliveProbes is the kernel's default probe count
// (net.ipv4.tcp_keepalive_probes), which the proxy leaves as it is.
const keepAliveProbes = 9

// userTimeout is the TCP_USER_TIMEOUT set beside keepalive ka: the time
// keepalive takes to find a dead peer (the idle time, then the kernel's 9
// probes an interval apart), so that a peer that died with data of ours
// unacknowledged, which keepalive does not probe, is found in the same
// time instead of after the kernel's retransmissions give up (15 minutes
// or more).
func userTimeout(ka net.KeepAliveConfig) time.Duration {
	return time.Duration(secondsUp(ka.Idle)+keepAliveProbes*secondsUp(ka.Interval)) * time.Second
}

// setUserTimeoutFD sets TCP_USER_TIMEOUT on the socket fd to d.
func setUserTimeoutFD(fd int, d time.Duration) error {
	ms := int(d / time.Millisecond)
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms); err != nil {
		return fmt.Errorf("pinproxy: setsockopt TCP_USER_TIMEOUT %d: %w", ms, err)
	}
	return nil
}

// dialControl is the proxy's own dialer's Control: it sets the user
// timeout beside the keepalive the dialer sets; nil when keepalive is off.
func (p *Proxy) dialControl() func(network, address string, c syscall.RawConn) error {
	if !p.keepAlive.Enable {
		return nil
	}
	ut := userTimeout(p.keepAlive)
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = setUserTimeoutFD(int(fd), ut) }); err != nil {
			return err
		}
		return serr
	}
}

// setUserTimeout sets the user timeout beside keepalive on c (see
// userTimeout); a conn whose keepalive is off gets none.
func (p *Proxy) setUserTimeout(c *net.TCPConn) {
	if !p.keepAlive.Enable {
		return
	}
	if rc, err := c.SyscallConn(); err == nil {
		ut := userTimeout(p.keepAlive)
		rc.Control(func(fd uintptr) { setUserTimeoutFD(int(fd), ut) })
	}
}

// setKeepAliveFD turns keepalive on for the socket fd with ka's idle time
// and interval (rounded up to whole seconds, as net does), and the user
// timeout that goes with it (userTimeout); the probe count stays the
// kernel's. Accepted sockets inherit all four from a listening socket.
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
	return setUserTimeoutFD(fd, userTimeout(ka))
}

// secondsUp is d in whole seconds, rounded up, at least 1.
func secondsUp(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}
