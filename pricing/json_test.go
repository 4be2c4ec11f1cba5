package pricing

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestHistoryJSON(t *testing.T) {
	h := build(t, Config{Window: 2 * hour}, change{0, 100}, change{hour, 80}, change{5 * hour, 90})
	if err := h.Prune(hours(2)); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"v":1,"window":"2h0m0s","pruned_before":"2026-11-30T02:00:00Z","changes":[` +
		`{"at":"2026-11-30T00:00:00Z","price":100},{"at":"2026-11-30T01:00:00Z","price":80},{"at":"2026-11-30T05:00:00Z","price":90}]}`
	if string(data) != want {
		t.Fatalf("marshal:\n%s\nwant\n%s", data, want)
	}
	var back History
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(&back)
	if string(again) != want {
		t.Fatalf("round trip:\n%s", again)
	}
	if _, err := back.Lock(hours(1)); !errors.Is(err, ErrPruned) {
		t.Errorf("the prune was not kept: %v", err)
	}

	empty, _ := json.Marshal(new(History))
	if string(empty) != `{"v":1,"window":"3h0m0s","changes":[]}` {
		t.Errorf("empty history: %s", empty)
	}
}

func TestHistoryJSONInvalid(t *testing.T) {
	const c0, c1 = `{"at":"2026-11-30T00:00:00Z","price":100}`, `{"at":"2026-11-30T01:00:00Z","price":80}`
	tests := []struct {
		name, data string
		want       error
	}{
		{"wrong type", `{"v":"1","window":"3h","changes":[]}`, ErrInvalid},
		{"not an object", `[]`, ErrInvalid},
		{"unknown version", `{"v":2,"window":"3h","changes":[]}`, ErrInvalid},
		{"no version", `{"window":"3h","changes":[]}`, ErrInvalid},
		{"bad window", `{"v":1,"window":"3 hours","changes":[]}`, ErrInvalid},
		{"zero window", `{"v":1,"window":"0s","changes":[]}`, ErrInvalid},
		{"negative window", `{"v":1,"window":"-3h","changes":[]}`, ErrInvalid},
		{"out of order", `{"v":1,"window":"3h","changes":[` + c1 + `,` + c0 + `]}`, ErrOutOfOrder},
		{"duplicate", `{"v":1,"window":"3h","changes":[` + c0 + `,` + c0 + `]}`, ErrOutOfOrder},
		{"negative price", `{"v":1,"window":"3h","changes":[{"at":"2026-11-30T00:00:00Z","price":-1}]}`, ErrInvalid},
		{"price not an integer", `{"v":1,"window":"3h","changes":[{"at":"2026-11-30T00:00:00Z","price":1.5}]}`, ErrInvalid},
		{"time before 1970", `{"v":1,"window":"3h","changes":[{"at":"1969-12-31T23:00:00Z","price":1}]}`, ErrInvalid},
	}
	for _, tt := range tests {
		h := build(t, Config{}, change{0, 7})
		err := json.Unmarshal([]byte(tt.data), h)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
		if p, _ := h.At(t0); h.Len() != 1 || p != 7 {
			t.Errorf("%s: a refused decode changed the history", tt.name)
		}
	}
}

func TestSessionJSON(t *testing.T) {
	s := Session{Start: t0, Locked: 100}
	data, _ := json.Marshal(s)
	if string(data) != `{"start":"2026-11-30T00:00:00Z","locked":100}` {
		t.Fatalf("running session: %s", data)
	}
	s.End = hours(2)
	data, _ = json.Marshal(s)
	if string(data) != `{"start":"2026-11-30T00:00:00Z","locked":100,"end":"2026-11-30T02:00:00Z"}` {
		t.Fatalf("ended session: %s", data)
	}
	var back Session
	if err := json.Unmarshal(data, &back); err != nil || !back.Start.Equal(s.Start) || !back.End.Equal(s.End) || back.Locked != 100 {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	for _, bad := range []string{
		`{"start":"2026-11-30T00:00:00Z","locked":-1}`,
		`{"start":"2026-11-30T00:00:00Z","locked":1,"end":"2026-11-29T00:00:00Z"}`,
		`{"locked":1}`,
		`[]`,
	} {
		if err := json.Unmarshal([]byte(bad), &back); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", bad, err)
		}
	}
}

// Decoding never panics; what decodes encodes back to the same history.
func FuzzHistoryJSON(f *testing.F) {
	f.Add(`{"v":1,"window":"3h0m0s","changes":[{"at":"2026-11-30T00:00:00Z","price":100},{"at":"2026-11-30T01:00:00Z","price":80}]}`)
	f.Add(`{"v":1,"window":"1ns","pruned_before":"2026-11-30T02:00:00Z","changes":[{"at":"1970-01-01T00:00:00Z","price":0}]}`)
	f.Add(`{"v":1,"window":"8784h","changes":[{"at":"2199-12-31T23:59:59.999999999Z","price":9223372036854775807}]}`)
	f.Add(`{"v":1,"window":"3h","changes":null}`)
	f.Add(`{"v":1}`)
	f.Fuzz(func(t *testing.T, data string) {
		var h History
		if err := h.UnmarshalJSON([]byte(data)); err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrOutOfOrder) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		out, err := json.Marshal(&h)
		if err != nil {
			t.Fatal(err)
		}
		var back History
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		again, _ := json.Marshal(&back)
		if string(again) != string(out) {
			t.Fatalf("round trip changed\n%s\n%s", out, again)
		}
		// Queries on what decoded never panic.
		if h.Len() > 0 {
			first := h.Changes()[0].At
			if s, err := h.Lock(first); err == nil {
				_, _ = h.SessionPrice(s, first.Add(4*hour))
				_, _ = h.Charge(s, []Usage{{At: first.Add(hour), Bytes: 1 << 40}})
			}
		}
	})
}
