package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/overload"
)

// errNoAnswer marks a netlink request that got no answer before its
// deadline (the context's own deadline is reported as the context's error).
var errNoAnswer = errors.New("no answer before the deadline")

// netlinkConn is the part of a *netlink.Conn the inet_diag and rtnetlink
// requests use. Probe.dial gives one per request; tests give connections
// from nltest, whose replies and errors they choose.
type netlinkConn interface {
	Execute(m netlink.Message) ([]netlink.Message, error)
	SetDeadline(t time.Time) error
	Close() error
}

var _ netlinkConn = (*netlink.Conn)(nil)

// dialNetlink opens a netlink socket of family in the calling thread's
// network namespace.
func dialNetlink(family int) (netlinkConn, error) {
	c, err := netlink.Dial(family, nil)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// exchange sends req on c and returns the replies. The request ends at
// deadline or when ctx ends, whichever comes first; a blocked receive is
// woken by moving the socket's deadline into the past.
func exchange(ctx context.Context, c netlinkConn, deadline time.Time, req netlink.Message) ([]netlink.Message, error) {
	if err := c.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("set deadline: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	msgs, err := c.Execute(req)
	if err != nil {
		if cerr := ctxDone(ctx); cerr != nil {
			return nil, cerr
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, errNoAnswer
		}
		return nil, err
	}
	return msgs, nil
}

// Netlink constants the probe needs that x/sys/unix does not name.
const (
	sockDiagByFamily = 20      // SOCK_DIAG_BY_FAMILY
	tcpListenState   = 10      // TCP_LISTEN
	tcpfListen       = 1 << 10 // TCPF_LISTEN: the idiag_states mask for listeners only
	inetDiagReqLen   = 56      // sizeof(struct inet_diag_req_v2)
	inetDiagMsgLen   = 72      // sizeof(struct inet_diag_msg)
	ifInfoMsgLen     = 16      // sizeof(struct ifinfomsg)
)

// listenRequest builds an inet_diag dump request for TCP sockets of family
// in LISTEN state only. With no other state in the mask the kernel walks
// only the listening hash, never the established one, so the request costs
// the same with 0 or 100,000 connections.
func listenRequest(family uint8) netlink.Message {
	b := make([]byte, inetDiagReqLen)
	b[0] = family
	b[1] = unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(b[4:8], tcpfListen)
	return netlink.Message{
		Header: netlink.Header{Type: sockDiagByFamily, Flags: netlink.Request | netlink.Dump},
		Data:   b,
	}
}

// parseListener parses one inet_diag_msg of a listening socket. For a
// listener the kernel puts the accept queue's length in idiag_rqueue and
// its limit (the backlog) in idiag_wqueue.
func parseListener(b []byte) (overload.Listener, error) {
	if len(b) < inetDiagMsgLen {
		return overload.Listener{}, fmt.Errorf("inet_diag message of %d bytes, want %d: %w", len(b), inetDiagMsgLen, errMalformed)
	}
	if b[1] != tcpListenState {
		return overload.Listener{}, fmt.Errorf("inet_diag message for a socket in state %d, not LISTEN: %w", b[1], errMalformed)
	}
	port := binary.BigEndian.Uint16(b[4:6])
	var addr netip.Addr
	switch b[0] {
	case unix.AF_INET:
		addr = netip.AddrFrom4([4]byte(b[8:12]))
	case unix.AF_INET6:
		addr = netip.AddrFrom16([16]byte(b[8:24]))
	default:
		return overload.Listener{}, fmt.Errorf("inet_diag message of address family %d: %w", b[0], errMalformed)
	}
	return overload.Listener{
		Addr:    netip.AddrPortFrom(addr, port).String(),
		Queue:   binary.NativeEndian.Uint32(b[56:60]),
		Backlog: binary.NativeEndian.Uint32(b[60:64]),
	}, nil
}

// listeners returns the TCP listeners of the calling thread's network
// namespace (at most maxListeners, the fullest) and how many there are,
// asking on a connection from dial through req (dialNetlink and
// listenRequest unless a test swaps them). A kernel without IPv6 answers
// the IPv6 request with ENOENT, EAFNOSUPPORT or EINVAL: it has no IPv6
// listeners, and the IPv4 ones stand.
func listeners(ctx context.Context, deadline time.Time, dial func(int) (netlinkConn, error), req func(family uint8) netlink.Message) (shown []overload.Listener, total int, err error) {
	c, err := dial(unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, 0, fmt.Errorf("inet_diag: dial: %w", err)
	}
	defer c.Close()
	var out []overload.Listener
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		msgs, err := exchange(ctx, c, deadline, req(fam))
		if err != nil && fam == unix.AF_INET6 && ctxDone(ctx) == nil &&
			(errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EINVAL)) {
			break // a kernel without IPv6 has no IPv6 listeners
		}
		if err != nil {
			return nil, 0, fmt.Errorf("inet_diag: family %d: %w", fam, err)
		}
		for _, m := range msgs {
			l, err := parseListener(m.Data)
			if err != nil {
				return nil, 0, fmt.Errorf("inet_diag: %w", err)
			}
			out = append(out, l)
		}
	}
	return fullest(out, maxListeners), len(out), nil
}

// maxListeners caps the listeners in a reading, which goes over the wire
// every 30 s; a node with more keeps the fullest.
const maxListeners = 1024

// fullest returns at most n listeners, the fullest accept queues first
// chosen, sorted by address.
func fullest(ls []overload.Listener, n int) []overload.Listener {
	if len(ls) > n {
		slices.SortFunc(ls, func(a, b overload.Listener) int {
			// Compare queue/backlog fill without division: a.Q/a.B vs b.Q/b.B.
			fa, fb := uint64(a.Queue)*uint64(max(b.Backlog, 1)), uint64(b.Queue)*uint64(max(a.Backlog, 1))
			switch {
			case fa > fb:
				return -1
			case fa < fb:
				return 1
			}
			return strings.Compare(a.Addr, b.Addr)
		})
		ls = ls[:n]
	}
	slices.SortFunc(ls, func(a, b overload.Listener) int { return strings.Compare(a.Addr, b.Addr) })
	return ls
}

// linkSample is one link's counters from netlink.
type linkSample struct {
	name    string
	index   int32
	addr    []byte
	flags   uint32
	rxBytes uint64
	txBytes uint64

	// Set by the bandwidth source for a counted link: the speed in Mbit/s
	// (0 when unknown) and, when unknown, why.
	speedMbps uint64
	speedWhy  string
}

// counted reports whether a link takes part in the bandwidth check: up,
// running and not loopback.
func (l linkSample) counted() bool {
	return l.flags&unix.IFF_LOOPBACK == 0 && l.flags&unix.IFF_UP != 0 && l.flags&unix.IFF_RUNNING != 0
}

// parseLink parses one RTM_NEWLINK message of a link dump.
func parseLink(b []byte) (linkSample, error) {
	if len(b) < ifInfoMsgLen {
		return linkSample{}, fmt.Errorf("ifinfomsg of %d bytes: %w", len(b), errMalformed)
	}
	l := linkSample{
		index: int32(binary.NativeEndian.Uint32(b[4:8])),
		flags: binary.NativeEndian.Uint32(b[8:12]),
	}
	ad, err := netlink.NewAttributeDecoder(b[ifInfoMsgLen:])
	if err != nil {
		return linkSample{}, fmt.Errorf("link %d attributes: %w", l.index, err)
	}
	var stats64, stats32 []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.IFLA_IFNAME:
			l.name = ad.String()
		case unix.IFLA_ADDRESS:
			l.addr = ad.Bytes()
		case unix.IFLA_STATS64:
			stats64 = ad.Bytes()
		case unix.IFLA_STATS:
			stats32 = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return linkSample{}, fmt.Errorf("link %d attributes: %w", l.index, err)
	}
	switch {
	case l.name == "" || len(l.name) >= unix.IFNAMSIZ || containsSlash(l.name):
		return linkSample{}, fmt.Errorf("link %d: bad name %q: %w", l.index, l.name, errMalformed)
	case len(stats64) >= 32: // rx_packets, tx_packets, rx_bytes, tx_bytes
		l.rxBytes = binary.NativeEndian.Uint64(stats64[16:24])
		l.txBytes = binary.NativeEndian.Uint64(stats64[24:32])
	case len(stats32) >= 16:
		l.rxBytes = uint64(binary.NativeEndian.Uint32(stats32[8:12]))
		l.txBytes = uint64(binary.NativeEndian.Uint32(stats32[12:16]))
	default:
		return linkSample{}, fmt.Errorf("link %s: no byte counters: %w", l.name, errMalformed)
	}
	return l, nil
}

func containsSlash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' || s[i] == 0 {
			return true
		}
	}
	return s == "." || s == ".."
}

// links dumps the links of the calling thread's network namespace with
// their byte counters (RTM_GETLINK), on a connection from dial.
func links(ctx context.Context, deadline time.Time, dial func(int) (netlinkConn, error)) ([]linkSample, error) {
	c, err := dial(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("rtnetlink: dial: %w", err)
	}
	defer c.Close()
	req := netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request | netlink.Dump},
		Data:   make([]byte, ifInfoMsgLen), // AF_UNSPEC: every link
	}
	msgs, err := exchange(ctx, c, deadline, req)
	if err != nil {
		return nil, fmt.Errorf("rtnetlink: links: %w", err)
	}
	out := make([]linkSample, 0, len(msgs))
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWLINK {
			continue
		}
		l, err := parseLink(m.Data)
		if err != nil {
			return nil, fmt.Errorf("rtnetlink: %w", err)
		}
		out = append(out, l)
	}
	return out, nil
}

// untilDeadline runs call, which uses c, and closes c if deadline passes
// or ctx ends first: closing a netlink socket wakes a blocked receive. It
// returns ctx's error or errNoAnswer in that case, else call's error.
// It is the deadline of connections that have none of their own.
func untilDeadline(ctx context.Context, deadline time.Time, c io.Closer, call func() error) error {
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	stop := context.AfterFunc(rctx, func() { _ = c.Close() })
	err := call()
	if !stop() {
		// Closed because the deadline passed or ctx ended while asking.
		if cerr := ctxDone(ctx); cerr != nil {
			return cerr
		}
		return errNoAnswer
	}
	return err
}

// conntrackDrops asks ctnetlink for the per-CPU statistics of the calling
// thread's network namespace (one small message per CPU; the table itself
// is never dumped) and returns, per CPU, Drop + EarlyDrop + InsertFailed.
//
// conntrack.Conn has no deadline of its own, so the connection is closed
// when the deadline passes or ctx ends, which wakes the blocked receive.
// (StatsGlobal is not used: on kernel 6.18 it never returns.)
func conntrackDrops(ctx context.Context, deadline time.Time) (map[int]uint64, error) {
	c, err := conntrack.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("ctnetlink: dial: %w", err)
	}
	defer c.Close()
	var stats []conntrack.Stats
	err = untilDeadline(ctx, deadline, c, func() (err error) {
		stats, err = c.Stats()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ctnetlink: stats: %w", err)
	}
	if len(stats) == 0 {
		return nil, fmt.Errorf("ctnetlink: stats: no CPU in the answer: %w", errMalformed)
	}
	out := make(map[int]uint64, len(stats))
	for _, s := range stats {
		out[int(s.CPUID)] = uint64(s.Drop) + uint64(s.EarlyDrop) + uint64(s.InsertFailed)
	}
	return out, nil
}

// permissionDenied reports whether err says the caller lacks a capability.
func permissionDenied(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, os.ErrPermission)
}
