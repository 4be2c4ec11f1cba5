package handover

import (
	"errors"
	"strings"
	"testing"
)

func TestParseMsg(t *testing.T) {
	conn := `{"upstream":"a:1","start":1,"up":3,"down":4,"ended":[false,false]}`
	for _, tt := range []struct {
		name string
		msg  string
		nfds int
		kind byte
		err  string // "" for none
	}{
		{"hello", `H{"version":2,"pid":7,"listeners":1,"conns":2,"state":{"any":"thing"}}`, 0, msgHello, ""},
		{"other version", `H{"version":1}`, 0, msgHello, "the old process speaks version 1, this one 2"},
		{"request", `Q{"version":2,"pid":7}`, 0, msgRequest, ""},
		{"request of another version", `Q{"version":3,"pid":7}`, 0, msgRequest, "the new process speaks version 3"},
		{"negative counts", `H{"version":2,"listeners":-1}`, 0, msgHello, "-1 listeners"},
		{"batch", `B{"listeners":[{"addr":"x"}],"conns":[` + conn + `]}`, 3, msgBatch, ""},
		{"descriptors missing", `B{"conns":[` + conn + `]}`, 1, msgBatch, "1 descriptors, want 2"},
		{"no upstream", `B{"conns":[{"start":1,"ended":[false,false]}]}`, 2, msgBatch, "connection 1: no upstream"},
		{"both ended", `B{"conns":[{"upstream":"a:1","ended":[true,true]}]}`, 2, msgBatch, "both directions ended"},
		{"parked and pending", `B{"conns":[{"upstream":"a:1","parked":true,"pending":["AAE=",""]}]}`, 2, msgBatch, "parked with"},
		{"pending on an ended direction", `B{"conns":[{"upstream":"a:1","ended":[true,false],"pending":["AAE=",""]}]}`, 2, msgBatch, "ended direction"},
		{"negative bytes", `B{"conns":[{"upstream":"a:1","up":-1}]}`, 2, msgBatch, "byte counts"},
		{"a pipe", `B{"conns":[{"upstream":"a:1","pipe_bytes":[0,70000]}]}`, 3, msgBatch, ""},
		{"a pipe without its descriptor", `B{"conns":[{"upstream":"a:1","pipe_bytes":[0,70000]}]}`, 2, msgBatch, "2 descriptors, want 3"},
		{"a pipe too full", `B{"conns":[{"upstream":"a:1","pipe_bytes":[2000000,0]}]}`, 3, msgBatch, "bytes in pipes"},
		{"a pipe and pending", `B{"conns":[{"upstream":"a:1","pipe_bytes":[5,0],"pending":["AAE=",""]}]}`, 3, msgBatch, "pending beside"},
		{"wrong kind", `E{"listeners":1,"conns":2}`, 0, msgHello, "got kind 'E', want 'H'"},
		{"empty", ``, 0, msgEnd, "empty"},
		{"not JSON", `E{"listeners":`, 0, msgEnd, "E:"},
		{"descriptors on an end", `E{"listeners":1,"conns":2}`, 1, msgEnd, "1 descriptors, want 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			switch tt.kind {
			case msgHello:
				v = new(wireHello)
			case msgRequest:
				v = new(wireRequest)
			case msgBatch:
				v = new(wireBatch)
			default:
				v = new(wireEnd)
			}
			err := parseMsg([]byte(tt.msg), tt.nfds, tt.kind, v)
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, errWire)):
				t.Errorf("error %v, want errWire saying %q", err, tt.err)
			}
		})
	}
}

// A batch that encodes parses back with its descriptors.
func TestWireRoundTrip(t *testing.T) {
	b := wireBatch{
		Listeners: []wireListener{{Addr: "127.0.0.1:9333", Name: "proxy"}},
		Conns: []ConnState{{Upstream: "eu-01:9333", Start: 17, Up: 5, Down: 6, Ended: [2]bool{true, false}, First: 1,
			Pending: [2][]byte{nil, []byte("in flight")}}},
	}
	msg, err := encodeMsg(msgBatch, b)
	if err != nil {
		t.Fatal(err)
	}
	var got wireBatch
	if err := parseMsg(msg, 3, msgBatch, &got); err != nil {
		t.Fatal(err)
	}
	if c := got.Conns[0]; c.Upstream != "eu-01:9333" || string(c.Pending[1]) != "in flight" || !c.Ended[0] || got.Listeners[0].Name != "proxy" {
		t.Errorf("round trip: %+v", got)
	}
}

// Whatever arrives, parsing returns an error or a checked message, and
// never panics.
func FuzzParseMsg(f *testing.F) {
	f.Add([]byte(`B{"conns":[{"upstream":"a:1","start":1,"ended":[false,true],"first":1}]}`), 2)
	f.Add([]byte(`H{"version":2,"listeners":1,"conns":1,"state":{}}`), 0)
	f.Add([]byte(`Q{"version":2,"pid":1}`), 0)
	f.Add([]byte(`E{"listeners":1,"conns":1}`), 0)
	f.Fuzz(func(t *testing.T, b []byte, nfds int) {
		if len(b) == 0 {
			return
		}
		var v any
		switch b[0] {
		case msgHello:
			v = new(wireHello)
		case msgRequest:
			v = new(wireRequest)
		case msgBatch:
			v = new(wireBatch)
		default:
			v = new(wireEnd)
		}
		if err := parseMsg(b, nfds, b[0], v); err != nil {
			return
		}
		if m, ok := v.(*wireBatch); ok {
			for _, c := range m.Conns {
				if c.check() != nil {
					t.Fatalf("parsed a connection that does not check: %+v", c)
				}
			}
			want := len(m.Listeners)
			for _, c := range m.Conns {
				want += c.fds()
			}
			if nfds != want {
				t.Fatalf("%d descriptors accepted for %d listeners and %d connections", nfds, len(m.Listeners), len(m.Conns))
			}
		}
	})
}
