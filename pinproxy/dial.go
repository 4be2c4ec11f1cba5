package pinproxy

import (
	"context"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
)

// A client's dial to an upstream given as an IP address takes the fast
// path: the proxy's own dialer is handed a context that can never end, so
// Go's connect starts no goroutine to watch it and sets no deadline on the
// socket (both per dial, with a timer and a context of its own, when the
// context can end). The dial timeout and Shutdown's abort are enforced
// from outside instead: the dialer's Control hook keeps the socket's
// RawConn, and a timer, or Shutdown, shuts the socket down, which aborts a
// connect still under way (a socket in SYN_SENT goes to CLOSE with
// ECONNRESET, and Go's wait for it returns). A name is resolved at each
// dial, so a dial to an upstream given by name keeps the context, which
// bounds the lookup too; so does a dialer given in Config.DialContext.

// dialing is one fast-path dial in flight.
type dialing struct {
	mu   sync.Mutex
	rc   syscall.RawConn // the socket, once the dialer made it
	why  error           // why it was aborted: errDialTimeout or ErrProxyClosed
	done bool            // the dial returned: abort leaves the socket alone

	prev, next *dialing // in dialings.head, under dialings.mu
}

// dialingKey is the context key the dial's *dialing travels under to the
// dialer's Control hook.
type dialingKey struct{}

// dialings are the fast-path dials in flight, for Shutdown to abort.
type dialings struct {
	mu     sync.Mutex
	head   *dialing
	killed bool // Shutdown aborted them: no new one starts
}

// errDialTimeout is the error of a fast-path dial that ran out of time:
// os.ErrDeadlineExceeded, as the runtime's own dial deadline reports.
var errDialTimeout = os.ErrDeadlineExceeded

// fastDialAddr returns u's address when a client's dial to it may take the
// fast path: the proxy's own dialer, an IP address, and a platform where a
// connect can be aborted from outside.
func (p *Proxy) fastDialAddr(u *upstream) (netip.AddrPort, bool) {
	if !p.ownDialer || !canAbortConnect {
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(u.addr)
	return ap, err == nil
}

// dialFast dials ap within timeout, or until Shutdown aborts dials. It
// returns ErrProxyClosed when Shutdown did.
func (p *Proxy) dialFast(u *upstream, ap netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	d := &dialing{}
	ds := &p.dialings
	ds.mu.Lock()
	if ds.killed {
		ds.mu.Unlock()
		return nil, ErrProxyClosed
	}
	d.next = ds.head
	if ds.head != nil {
		ds.head.prev = d
	}
	ds.head = d
	ds.mu.Unlock()

	t := time.AfterFunc(timeout, func() { d.abort(errDialTimeout) })
	c, err := p.dial(context.WithValue(context.Background(), dialingKey{}, d), "tcp", u.addr)
	t.Stop()
	d.mu.Lock()
	d.done = true
	d.rc = nil
	why := d.why
	d.mu.Unlock()

	ds.mu.Lock()
	if d.prev != nil {
		d.prev.next = d.next
	} else if ds.head == d {
		ds.head = d.next
	}
	if d.next != nil {
		d.next.prev = d.prev
	}
	d.prev, d.next = nil, nil
	ds.mu.Unlock()

	if why == nil {
		return c, err
	}
	if c != nil { // it connected just as it was aborted
		c.Close()
	}
	if why == ErrProxyClosed {
		return nil, why
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: why}
}

// abortDials aborts the fast-path dials in flight, and any started later;
// Shutdown calls it once killCtx has ended.
func (p *Proxy) abortDials() {
	ds := &p.dialings
	ds.mu.Lock()
	ds.killed = true
	var all []*dialing
	for d := ds.head; d != nil; d = d.next {
		all = append(all, d)
	}
	ds.mu.Unlock()
	for _, d := range all {
		d.abort(ErrProxyClosed)
	}
}

// socket records the dial's socket; the dialer's Control hook calls it
// before connect. It fails the dial when it was aborted already.
func (d *dialing) socket(rc syscall.RawConn) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.why != nil {
		return d.why
	}
	d.rc = rc
	return nil
}

// abort ends the dial for why, unless it returned already: a connect under
// way is aborted (abortConnect); a dial whose socket is not made yet fails
// when it is.
func (d *dialing) abort(why error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done || d.why != nil {
		return
	}
	d.why = why
	if d.rc != nil {
		// Control fails, touching nothing, once the socket is closed, so
		// a descriptor number reused meanwhile is safe.
		d.rc.Control(abortConnect)
	}
}
