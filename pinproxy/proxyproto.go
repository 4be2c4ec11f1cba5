package pinproxy

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// sendProxyHeader writes the PROXY protocol header (Config.SendProxy's
// version) for c's client to its upstream, within the dial timeout from
// now (the real clock's, as socket deadlines are).
func (p *Proxy) sendProxyHeader(c *conn, now time.Time) error {
	h := proxyHeader(p.cfg.SendProxy, c.client.RemoteAddr(), c.client.LocalAddr())
	c.upstream.SetWriteDeadline(now.Add(p.cfg.DialTimeout))
	_, err := c.upstream.Write(h)
	c.upstream.SetWriteDeadline(time.Time{})
	if err != nil {
		return proxyHeaderError(c.up.addr, err)
	}
	return nil
}

// proxyHeaderError is a failed write of the PROXY header to upstream.
func proxyHeaderError(upstream string, err error) error {
	return fmt.Errorf("pinproxy: sending the PROXY header to %s: %w", upstream, err)
}

// v2Sig starts every PROXY protocol v2 header.
var v2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// proxyHeader returns the PROXY protocol header, version 1 (text) or 2
// (binary), for a client at src that connected to dst. Addresses that are
// not TCP give the "UNKNOWN" (v1) or LOCAL (v2) form, which tells the
// upstream to use the connection's own addresses.
func proxyHeader(version int, src, dst net.Addr) []byte {
	s, sok := addrPort(src)
	d, dok := addrPort(dst)
	ok := sok && dok && s.Addr().Is4() == d.Addr().Is4()
	if version == 1 {
		if !ok {
			return []byte("PROXY UNKNOWN\r\n")
		}
		fam := "TCP4"
		if !s.Addr().Is4() {
			fam = "TCP6"
		}
		return []byte("PROXY " + fam + " " + s.Addr().String() + " " + d.Addr().String() + " " +
			strconv.Itoa(int(s.Port())) + " " + strconv.Itoa(int(d.Port())) + "\r\n")
	}
	h := append([]byte(nil), v2Sig...)
	if !ok {
		return append(h, 0x20, 0x00, 0, 0) // version 2, LOCAL; no address
	}
	if s.Addr().Is4() {
		h = append(h, 0x21, 0x11, 0, 12) // version 2, PROXY; TCP over IPv4; 12 bytes
		h = append(h, s.Addr().AsSlice()...)
		h = append(h, d.Addr().AsSlice()...)
	} else {
		h = append(h, 0x21, 0x21, 0, 36) // TCP over IPv6; 36 bytes
		h = append(h, s.Addr().AsSlice()...)
		h = append(h, d.Addr().AsSlice()...)
	}
	h = binary.BigEndian.AppendUint16(h, s.Port())
	return binary.BigEndian.AppendUint16(h, d.Port())
}

// addrPort returns a TCP address as an AddrPort, IPv4-mapped addresses
// unmapped.
func addrPort(a net.Addr) (netip.AddrPort, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), ap.IsValid()
}
