package probe

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/overload"
)

// fakeConn is a connection from nltest. nltest's socket has no deadline;
// its replies are immediate, so SetDeadline has nothing to bound.
type fakeConn struct{ *netlink.Conn }

func (fakeConn) SetDeadline(time.Time) error { return nil }

// fakeDial returns a dial that hands out connections answering with fn,
// and counts them; a nil fn fails every dial with EPERM.
func fakeDial(fn nltest.Func, dials *atomic.Int32) func(int) (netlinkConn, error) {
	return func(int) (netlinkConn, error) {
		if dials != nil {
			dials.Add(1)
		}
		if fn == nil {
			return nil, os.NewSyscallError("socket", unix.EPERM)
		}
		return fakeConn{nltest.Dial(fn)}, nil
	}
}

// reply returns the messages as a multi-part answer to req.
func reply(req []netlink.Message, typ netlink.HeaderType, bodies ...[]byte) ([]netlink.Message, error) {
	msgs := make([]netlink.Message, 0, len(bodies)+1)
	for _, b := range bodies {
		msgs = append(msgs, netlink.Message{
			Header: netlink.Header{Type: typ, Sequence: req[0].Header.Sequence, PID: req[0].Header.PID},
			Data:   b,
		})
	}
	msgs = append(msgs, netlink.Message{Header: netlink.Header{Type: netlink.Done, Sequence: req[0].Header.Sequence, PID: req[0].Header.PID}, Data: make([]byte, 4)})
	return nltest.Multipart(msgs)
}

// nlError answers req with errno as the kernel does. nltest.Error keeps
// the request's flags, which in an error message mean "capped" and "with
// extended ack attributes" (NLM_F_CAPPED, NLM_F_ACK_TLVS) for a dump
// request: the kernel sets neither here.
func nlError(errno unix.Errno, req []netlink.Message) ([]netlink.Message, error) {
	msgs, err := nltest.Error(int(errno), req)
	for i := range msgs {
		msgs[i].Header.Flags = 0
	}
	return msgs, err
}

// diagAnswer answers an inet_diag request for IPv4 with v4 and for IPv6
// with the errno v6Err, or v6 when v6Err is 0.
func diagAnswer(v4, v6 [][]byte, v4Err, v6Err unix.Errno) nltest.Func {
	return func(req []netlink.Message) ([]netlink.Message, error) {
		if req[0].Header.Type != sockDiagByFamily || req[0].Header.Flags != netlink.Request|netlink.Dump {
			return nil, errors.New("not an inet_diag dump request")
		}
		switch req[0].Data[0] {
		case unix.AF_INET:
			if v4Err != 0 {
				return nlError(v4Err, req)
			}
			return reply(req, sockDiagByFamily, v4...)
		case unix.AF_INET6:
			if v6Err != 0 {
				return nlError(v6Err, req)
			}
			return reply(req, sockDiagByFamily, v6...)
		}
		return nil, errors.New("request for another family")
	}
}

// TestListenersFake: the inet_diag requests' answers and failures, from a
// faked kernel.
func TestListenersFake(t *testing.T) {
	lo := []byte{127, 0, 0, 1}
	v6lo := make([]byte, 16)
	v6lo[15] = 1
	v4 := [][]byte{
		diagMsg(unix.AF_INET, tcpListenState, 8080, lo, 3, 4),
		diagMsg(unix.AF_INET, tcpListenState, 22, nil, 0, 128),
	}
	v6 := [][]byte{diagMsg(unix.AF_INET6, tcpListenState, 443, v6lo, 1, 10)}
	bothWant := []string{"0.0.0.0:22", "127.0.0.1:8080", "[::1]:443"}
	v4Want := []string{"0.0.0.0:22", "127.0.0.1:8080"}
	tests := []struct {
		name string
		fn   nltest.Func
		want []string // addresses; nil with wantErr
		err  string
		is   error
	}{
		{name: "both families", fn: diagAnswer(v4, v6, 0, 0), want: bothWant},
		// A kernel without IPv6 answers in one of three ways, by version
		// and by whether the module is missing or disabled.
		{name: "no IPv6: ENOENT", fn: diagAnswer(v4, nil, 0, unix.ENOENT), want: v4Want},
		{name: "no IPv6: EAFNOSUPPORT", fn: diagAnswer(v4, nil, 0, unix.EAFNOSUPPORT), want: v4Want},
		{name: "no IPv6: EINVAL", fn: diagAnswer(v4, nil, 0, unix.EINVAL), want: v4Want},
		{name: "IPv6 refused", fn: diagAnswer(v4, nil, 0, unix.EPERM), err: "inet_diag: family 10", is: unix.EPERM},
		{name: "IPv4 refused", fn: diagAnswer(nil, v6, unix.EPERM, 0), err: "inet_diag: family 2", is: unix.EPERM},
		// ENOENT for IPv4 is no fallback: inet_diag itself is missing.
		{name: "no inet_diag", fn: diagAnswer(nil, nil, unix.ENOENT, 0), err: "inet_diag: family 2", is: unix.ENOENT},
		{name: "malformed answer", fn: diagAnswer([][]byte{diagMsg(unix.AF_INET, 1, 22, nil, 0, 1)}, nil, 0, 0),
			err: "inet_diag: inet_diag message for a socket in state 1", is: errMalformed},
		{name: "short answer", fn: diagAnswer([][]byte{make([]byte, 10)}, nil, 0, 0), err: "inet_diag: inet_diag message of 10 bytes", is: errMalformed},
		{name: "dial fails", fn: nil, err: "inet_diag: dial", is: unix.EPERM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shown, total, err := listeners(context.Background(), time.Now().Add(time.Minute), fakeDial(tt.fn, nil), listenRequest)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, tt.is) {
					t.Fatalf("listeners = %v, %d, %v; want an error with %q, wrapping %v", shown, total, err, tt.err, tt.is)
				}
				return
			}
			if err != nil {
				t.Fatalf("listeners: %v", err)
			}
			var got []string
			for _, l := range shown {
				got = append(got, l.Addr)
			}
			if !slices.Equal(got, tt.want) || total != len(tt.want) {
				t.Fatalf("listeners = %v (%d), want %v", got, total, tt.want)
			}
		})
	}

	t.Run("capped at the fullest", func(t *testing.T) {
		var many [][]byte
		for i := range maxListeners + 5 {
			many = append(many, diagMsg(unix.AF_INET, tcpListenState, uint16(1000+i), lo, uint32(i%2), 1))
		}
		shown, total, err := listeners(context.Background(), time.Now().Add(time.Minute), fakeDial(diagAnswer(many, nil, 0, unix.ENOENT), nil), listenRequest)
		if err != nil || len(shown) != maxListeners || total != maxListeners+5 {
			t.Fatalf("listeners = %d shown of %d, %v; want %d of %d", len(shown), total, err, maxListeners, maxListeners+5)
		}
	})
}

// linkAnswer answers a link dump with bodies, after checking it is one.
func linkAnswer(t *testing.T, bodies ...[]byte) nltest.Func {
	return nltest.CheckRequest(
		[]netlink.HeaderType{unix.RTM_GETLINK},
		[]netlink.HeaderFlags{netlink.Request | netlink.Dump},
		func(req []netlink.Message) ([]netlink.Message, error) {
			return reply(req, unix.RTM_NEWLINK, bodies...)
		})
}

// TestLinksFake: the rtnetlink link dump's answers and failures, from a
// faked kernel.
func TestLinksFake(t *testing.T) {
	up := uint32(unix.IFF_UP | unix.IFF_RUNNING)
	mac := []byte{2, 0, 0, 0, 0, 1}
	t.Run("dump", func(t *testing.T) {
		fn := func(req []netlink.Message) ([]netlink.Message, error) {
			msgs, _ := linkAnswer(t,
				linkMsg(t, 1, up|unix.IFF_LOOPBACK, "lo", nil, 5, 5, true),
				linkMsg(t, 2, up, "eth0", mac, 1<<40, 7, true))(req)
			// A message of another type in the dump is left out.
			other := msgs[0]
			other.Header.Type = unix.RTM_NEWADDR
			return append([]netlink.Message{other}, msgs...), nil
		}
		got, err := links(context.Background(), time.Now().Add(time.Minute), fakeDial(fn, nil))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].name != "lo" || got[1].name != "eth0" || got[1].rxBytes != 1<<40 || got[1].txBytes != 7 || !got[1].counted() || got[0].counted() {
			t.Fatalf("links = %+v", got)
		}
	})
	errTests := []struct {
		name string
		fn   nltest.Func
		err  string
		is   error
	}{
		{name: "refused", fn: func(req []netlink.Message) ([]netlink.Message, error) { return nlError(unix.EPERM, req) },
			err: "rtnetlink: links", is: unix.EPERM},
		{name: "no answer", fn: func([]netlink.Message) ([]netlink.Message, error) { return nil, os.ErrDeadlineExceeded },
			err: "rtnetlink: links", is: errNoAnswer},
		{name: "malformed link", fn: linkAnswer(t, linkMsg(t, 5, up, "../x", nil, 1, 1, true)), err: "rtnetlink: link 5: bad name", is: errMalformed},
		{name: "no counters", fn: linkAnswer(t, make([]byte, ifInfoMsgLen)), err: "rtnetlink: link 0: bad name", is: errMalformed},
		{name: "dial fails", fn: nil, err: "rtnetlink: dial", is: unix.EPERM},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := links(context.Background(), time.Now().Add(time.Minute), fakeDial(tt.fn, nil))
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, tt.is) {
				t.Fatalf("links = %+v, %v; want an error with %q, wrapping %v", got, err, tt.err, tt.is)
			}
		})
	}
}

// TestReadFakeNetlink: a whole Read against fixture files and a faked
// netlink kernel, without root: the IPv6 fallback leaves no note, link
// rates come from the faked counters and the fixture sysfs's speed, and a
// failing dump makes bandwidth missing with a note.
func TestReadFakeNetlink(t *testing.T) {
	root := fixtureRoot(t)
	sys := t.TempDir()
	mac := []byte{2, 0, 0, 0, 0, 1}
	dev := filepath.Join(sys, "class", "net", "eth0")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dev, "ifindex"), "2\n")
	writeFile(t, filepath.Join(dev, "address"), net.HardwareAddr(mac).String()+"\n")
	writeFile(t, filepath.Join(dev, "speed"), "1000\n")

	up := uint32(unix.IFF_UP | unix.IFF_RUNNING)
	var rx atomic.Uint64
	var failLinks atomic.Bool
	diag := diagAnswer([][]byte{diagMsg(unix.AF_INET, tcpListenState, 22, nil, 0, 128)}, nil, 0, unix.EAFNOSUPPORT)
	p := newProbe(t, Config{ProcRoot: root, SysRoot: sys})
	var dials atomic.Int32
	p.dial = func(family int) (netlinkConn, error) {
		switch family {
		case unix.NETLINK_SOCK_DIAG:
			return fakeDial(diag, &dials)(family)
		case unix.NETLINK_ROUTE:
			if failLinks.Load() {
				return fakeDial(func(req []netlink.Message) ([]netlink.Message, error) { return nlError(unix.EPERM, req) }, &dials)(family)
			}
			return fakeDial(linkAnswer(t, linkMsg(t, 2, up, "eth0", mac, rx.Load(), 0, true)), &dials)(family)
		}
		t.Errorf("dial of netlink family %d", family)
		return nil, unix.EPROTONOSUPPORT
	}

	r := read(t, p)
	if len(r.Listeners) != 1 || r.Listeners[0].Addr != "0.0.0.0:22" || len(notesWith(r.Notes, "listeners")) != 0 {
		t.Fatalf("first reading: listeners %+v, notes %q; want 0.0.0.0:22 and no listeners note", r.Listeners, r.Notes)
	}
	time.Sleep(100 * time.Millisecond)
	rx.Store(1 << 30)
	r = read(t, p)
	if slices.Contains(r.Missing, overload.InputBandwidth) || len(r.Links) != 1 {
		t.Fatalf("second reading: missing %v, links %+v, notes %q", r.Missing, r.Links, r.Notes)
	}
	if l := r.Links[0]; l.Name != "eth0" || l.SpeedMbps != 1000 || l.RxBitsPerSecond <= 0 || l.TxBitsPerSecond != 0 {
		t.Fatalf("second reading: link %+v", l)
	}

	failLinks.Store(true)
	r = read(t, p)
	if !slices.Contains(r.Missing, overload.InputBandwidth) || len(notesWith(r.Notes, "bandwidth: rtnetlink: links")) == 0 {
		t.Fatalf("reading with a refused dump: missing %v, notes %q", r.Missing, r.Notes)
	}
	if got := dials.Load(); got != 6 {
		t.Errorf("%d netlink dials in 3 readings, want 6 (one inet_diag, one rtnetlink each)", got)
	}
}
