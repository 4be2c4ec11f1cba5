package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/overload"
)

// diagMsg builds an inet_diag_msg as the kernel sends it.
func diagMsg(family, state uint8, port uint16, addr []byte, rqueue, wqueue uint32) []byte {
	b := make([]byte, inetDiagMsgLen)
	b[0], b[1] = family, state
	binary.BigEndian.PutUint16(b[4:6], port)
	copy(b[8:24], addr)
	binary.NativeEndian.PutUint32(b[56:60], rqueue)
	binary.NativeEndian.PutUint32(b[60:64], wqueue)
	return b
}

func TestParseListener(t *testing.T) {
	v6 := make([]byte, 16)
	v6[15] = 1
	tests := []struct {
		name    string
		in      []byte
		want    overload.Listener
		wantErr bool
	}{
		{name: "ipv4", in: diagMsg(unix.AF_INET, tcpListenState, 8080, []byte{127, 0, 0, 1}, 2, 1),
			want: overload.Listener{Addr: "127.0.0.1:8080", Queue: 2, Backlog: 1}},
		{name: "ipv6", in: diagMsg(unix.AF_INET6, tcpListenState, 443, v6, 0, 4096),
			want: overload.Listener{Addr: "[::1]:443", Queue: 0, Backlog: 4096}},
		{name: "any", in: diagMsg(unix.AF_INET, tcpListenState, 22, nil, 0, 128),
			want: overload.Listener{Addr: "0.0.0.0:22", Queue: 0, Backlog: 128}},
		{name: "short", in: diagMsg(unix.AF_INET, tcpListenState, 22, nil, 0, 128)[:71], wantErr: true},
		{name: "established", in: diagMsg(unix.AF_INET, 1, 22, nil, 0, 128), wantErr: true},
		{name: "unix family", in: diagMsg(unix.AF_UNIX, tcpListenState, 22, nil, 0, 128), wantErr: true},
		{name: "empty", in: nil, wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseListener(tt.in)
		if tt.wantErr {
			if !errors.Is(err, errMalformed) {
				t.Errorf("%s: parseListener = %+v, %v; want a malformed error", tt.name, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: parseListener = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

// linkMsg builds an RTM_NEWLINK body.
func linkMsg(t testing.TB, index int32, flags uint32, name string, addr []byte, rx, tx uint64, stats64 bool) []byte {
	b := make([]byte, ifInfoMsgLen)
	binary.NativeEndian.PutUint32(b[4:8], uint32(index))
	binary.NativeEndian.PutUint32(b[8:12], flags)
	ae := netlink.NewAttributeEncoder()
	if name != "" {
		ae.String(unix.IFLA_IFNAME, name)
	}
	if addr != nil {
		ae.Bytes(unix.IFLA_ADDRESS, addr)
	}
	if stats64 {
		s := make([]byte, 200)
		binary.NativeEndian.PutUint64(s[16:24], rx)
		binary.NativeEndian.PutUint64(s[24:32], tx)
		ae.Bytes(unix.IFLA_STATS64, s)
	} else {
		s := make([]byte, 96)
		binary.NativeEndian.PutUint32(s[8:12], uint32(rx))
		binary.NativeEndian.PutUint32(s[12:16], uint32(tx))
		ae.Bytes(unix.IFLA_STATS, s)
	}
	attrs, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return append(b, attrs...)
}

func TestParseLink(t *testing.T) {
	up := uint32(unix.IFF_UP | unix.IFF_RUNNING)
	mac := []byte{2, 0, 0, 0, 0, 1}
	tests := []struct {
		name    string
		in      []byte
		want    linkSample
		counted bool
		wantErr bool
	}{
		{name: "stats64", in: linkMsg(t, 2, up, "eth0", mac, 1<<40, 5, true),
			want: linkSample{name: "eth0", index: 2, flags: up, addr: mac, rxBytes: 1 << 40, txBytes: 5}, counted: true},
		{name: "stats32 only", in: linkMsg(t, 3, up, "tun0", nil, 7, 9, false),
			want: linkSample{name: "tun0", index: 3, flags: up, rxBytes: 7, txBytes: 9}, counted: true},
		{name: "loopback", in: linkMsg(t, 1, up|unix.IFF_LOOPBACK, "lo", nil, 1, 1, true),
			want: linkSample{name: "lo", index: 1, flags: up | unix.IFF_LOOPBACK, rxBytes: 1, txBytes: 1}},
		{name: "down", in: linkMsg(t, 4, 0, "eth1", nil, 1, 1, true),
			want: linkSample{name: "eth1", index: 4, rxBytes: 1, txBytes: 1}},
		{name: "up, no carrier", in: linkMsg(t, 4, unix.IFF_UP, "eth1", nil, 1, 1, true),
			want: linkSample{name: "eth1", index: 4, flags: unix.IFF_UP, rxBytes: 1, txBytes: 1}},
		{name: "no name", in: linkMsg(t, 5, up, "", nil, 1, 1, true), wantErr: true},
		{name: "name with slash", in: linkMsg(t, 5, up, "../x", nil, 1, 1, true), wantErr: true},
		{name: "dot dot", in: linkMsg(t, 5, up, "..", nil, 1, 1, true), wantErr: true},
		{name: "short header", in: make([]byte, 10), wantErr: true},
		{name: "truncated attributes", in: linkMsg(t, 2, up, "eth0", mac, 1, 1, true)[:40], wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseLink(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("%s: parseLink = %+v, want an error", tt.name, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: parseLink: %v", tt.name, err)
			continue
		}
		if got.name != tt.want.name || got.index != tt.want.index || got.flags != tt.want.flags ||
			string(got.addr) != string(tt.want.addr) || got.rxBytes != tt.want.rxBytes || got.txBytes != tt.want.txBytes {
			t.Errorf("%s: parseLink = %+v, want %+v", tt.name, got, tt.want)
		}
		if got.counted() != tt.counted {
			t.Errorf("%s: counted = %v, want %v", tt.name, got.counted(), tt.counted)
		}
	}
}

func TestFullest(t *testing.T) {
	ls := []overload.Listener{
		{Addr: "d:1", Queue: 0, Backlog: 10},
		{Addr: "c:1", Queue: 5, Backlog: 10},
		{Addr: "b:1", Queue: 2, Backlog: 1},
		{Addr: "a:1", Queue: 1, Backlog: 100},
		{Addr: "e:1", Queue: 3, Backlog: 0},
	}
	got := fullest(slices.Clone(ls), 3)
	want := []overload.Listener{ls[2], ls[1], ls[4]} // half full, over full, 3 on a 0 backlog; by address
	if !slices.Equal(got, want) {
		t.Fatalf("fullest = %+v, want %+v", got, want)
	}
	if got := fullest(slices.Clone(ls), 10); len(got) != 5 || got[0].Addr != "a:1" || got[4].Addr != "e:1" {
		t.Fatalf("fullest under the cap = %+v, want all five by address", got)
	}
}

func FuzzParseListener(f *testing.F) {
	f.Add(diagMsg(unix.AF_INET, tcpListenState, 8080, []byte{127, 0, 0, 1}, 2, 1))
	f.Add(diagMsg(unix.AF_INET6, tcpListenState, 443, nil, 0, 4096))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := parseListener(b)
		if err == nil && l.Addr == "" {
			t.Fatal("parseListener: no error and no address")
		}
	})
}

func FuzzParseLink(f *testing.F) {
	f.Add(linkMsg(f, 2, unix.IFF_UP|unix.IFF_RUNNING, "eth0", []byte{2, 0, 0, 0, 0, 1}, 1, 2, true))
	f.Add(linkMsg(f, 3, unix.IFF_UP, "tun0", nil, 1, 2, false))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := parseLink(b)
		if err == nil && (l.name == "" || containsSlash(l.name)) {
			t.Fatalf("parseLink: no error and name %q", l.name)
		}
	})
}

// noAnswer is a request the kernel takes and never answers: a NOOP
// without the ack flag.
func noAnswer(uint8) netlink.Message {
	return netlink.Message{Header: netlink.Header{Type: netlink.Noop, Flags: netlink.Request}}
}

func TestExchangeDeadline(t *testing.T) {
	c, err := netlink.Dial(unix.NETLINK_SOCK_DIAG, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The request's own deadline: no answer, not the context's error.
	_, err = exchange(context.Background(), c, time.Now().Add(50*time.Millisecond), noAnswer(0))
	if !errors.Is(err, errNoAnswer) {
		t.Fatalf("exchange with a deadline = %v, want errNoAnswer", err)
	}

	// The context ends first: its error.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = exchange(ctx, c, time.Now().Add(time.Hour), noAnswer(0))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("exchange with a canceled context = %v, want context.Canceled", err)
	}

	// The socket still works for a real request after both.
	msgs, err := exchange(context.Background(), c, time.Now().Add(10*time.Second), listenRequest(unix.AF_INET))
	if err != nil {
		t.Fatalf("exchange after deadlines: %v", err)
	}
	for _, m := range msgs {
		if _, err := parseListener(m.Data); err != nil {
			t.Fatalf("listener after deadlines: %v", err)
		}
	}
}

func TestUntilDeadline(t *testing.T) {
	dial := func() *netlink.Conn {
		c, err := netlink.Dial(unix.NETLINK_SOCK_DIAG, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	stall := func(c *netlink.Conn) func() error {
		return func() error { _, err := c.Execute(noAnswer(0)); return err }
	}

	c := dial()
	err := untilDeadline(context.Background(), time.Now().Add(50*time.Millisecond), c, stall(c))
	if !errors.Is(err, errNoAnswer) {
		t.Fatalf("untilDeadline past its deadline = %v, want errNoAnswer", err)
	}

	c = dial()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := untilDeadline(ctx, time.Now().Add(time.Hour), c, stall(c)); !errors.Is(err, context.Canceled) {
		t.Fatalf("untilDeadline with a canceled context = %v, want context.Canceled", err)
	}

	c = dial()
	err = untilDeadline(context.Background(), time.Now().Add(time.Hour), c, func() error {
		_, err := c.Execute(listenRequest(unix.AF_INET))
		return err
	})
	if err != nil {
		t.Fatalf("untilDeadline with an answer: %v", err)
	}
}

// TestReadDeadline: a netlink peer that never answers must not hang Read
// beyond its context, nor beyond Config.Timeout when the context has no
// deadline.
func TestReadDeadline(t *testing.T) {
	t.Run("context deadline", func(t *testing.T) {
		p, err := New(Config{Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		p.listenRequest = noAnswer
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := p.Read(ctx)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Read = %v, want context.DeadlineExceeded", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Read still blocked a minute after its context's deadline")
		}
	})
	t.Run("request timeout", func(t *testing.T) {
		p, err := New(Config{Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		p.listenRequest = noAnswer
		done := make(chan error, 1)
		var r overload.Reading
		go func() {
			var err error
			r, err = p.Read(context.Background())
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Read still blocked a minute after its request timeout")
		}
		if len(notesWith(r.Notes, "listeners: inet_diag")) == 0 || len(r.Listeners) != 0 {
			t.Fatalf("Read with an unanswered inet_diag: listeners %v, notes %q; want none and a note", r.Listeners, r.Notes)
		}
		if r.MemoryUsedPercent <= 0 || r.CPUs <= 0 {
			t.Fatalf("Read lost procfs inputs: %+v", r)
		}
	})
	t.Run("canceled before", func(t *testing.T) {
		p, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := p.Read(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Read = %v, want context.Canceled", err)
		}
	})
}
