package pricing

import (
	"encoding/json"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genHistory draws a history whose change instants are whole minutes
// after t0, its window a whole number of minutes (or the default).
func genHistory(t *rapid.T) *History {
	window := time.Duration(rapid.SampledFrom([]int{0, 1, 30, 60, 180, 240}).Draw(t, "window minutes")) * time.Minute
	h, err := NewHistory(Config{Window: window})
	if err != nil {
		t.Fatal(err)
	}
	n := rapid.IntRange(1, 25).Draw(t, "changes")
	at := t0
	for i := range n {
		if i > 0 {
			at = at.Add(time.Duration(rapid.IntRange(1, 300).Draw(t, "gap minutes")) * time.Minute)
		}
		// Few distinct prices, so ties and returns to an earlier price happen.
		if err := h.Set(at, Price(rapid.IntRange(0, 6).Draw(t, "price")*10)); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// genSession draws a history (genHistory) and a session locked in it,
// starting a whole number of minutes after t0.
func genSession(t *rapid.T) (*History, Session) {
	h := genHistory(t)
	s, err := h.Lock(minutesAfter(t, t0, 3000, "start"))
	if err != nil {
		t.Fatal(err)
	}
	return h, s
}

// minutesAfter draws an instant a whole number of minutes after from.
func minutesAfter(t *rapid.T, from time.Time, max int, label string) time.Time {
	return from.Add(time.Duration(rapid.IntRange(0, max).Draw(t, label)) * time.Minute)
}

// The fast session price equals the rule sampled every minute.
func TestPropertyMatchesSampledRule(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h, s := genSession(t)
		at := minutesAfter(t, s.Start, 1500, "at")
		got, err := h.SessionPrice(s, at)
		if err != nil {
			t.Fatal(err)
		}
		want := refSampled(h, s.Locked, s.Start.UnixNano(), at.UnixNano(), int64(time.Minute))
		if got != want {
			t.Fatalf("price at %v: %d, the rule sampled every minute says %d", at.Sub(t0), got, want)
		}
	})
}

// With instants anywhere (to the nanosecond) and any locked price, the fast
// session price equals the rule evaluated at every instant it can change.
func TestPropertyMatchesRuleAnyInstant(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		window := time.Duration(rapid.Int64Range(1, int64(5*time.Hour)).Draw(t, "window"))
		h, err := NewHistory(Config{Window: window})
		if err != nil {
			t.Fatal(err)
		}
		at := t0
		for i := range rapid.IntRange(1, 30).Draw(t, "changes") {
			if i > 0 {
				at = at.Add(time.Duration(rapid.Int64Range(1, int64(4*time.Hour)).Draw(t, "gap")))
			}
			if err := h.Set(at, Price(rapid.IntRange(0, 5).Draw(t, "price"))); err != nil {
				t.Fatal(err)
			}
		}
		start := t0.Add(time.Duration(rapid.Int64Range(0, int64(60*time.Hour)).Draw(t, "start")))
		s := Session{Start: start, Locked: Price(rapid.IntRange(0, 6).Draw(t, "locked"))}
		for range 5 {
			q := start.Add(time.Duration(rapid.Int64Range(0, int64(30*time.Hour)).Draw(t, "at")))
			got, err := h.SessionPrice(s, q)
			if err != nil {
				t.Fatal(err)
			}
			if want := refSessionPrice(h, s.Locked, start.UnixNano(), q.UnixNano()); got != want {
				t.Fatalf("price at %v: %d, the rule says %d", q.Sub(t0), got, want)
			}
		}
	})
}

// The session price never rises, never exceeds the locked price, and
// equals the locked price while the node never asked less for a whole
// window.
func TestPropertyNeverRises(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h, s := genSession(t)
		w := h.win()
		prev := s.Locked
		lowerStood := false // the node asked less than locked during a whole window
		for m := int64(0); m <= 1500; m += 7 {
			at := s.Start.Add(time.Duration(m) * time.Minute)
			p, err := h.SessionPrice(s, at)
			if err != nil {
				t.Fatal(err)
			}
			if p > prev {
				t.Fatalf("at %v: rose from %d to %d", at.Sub(t0), prev, p)
			}
			if p > s.Locked {
				t.Fatalf("at %v: %d above the locked %d", at.Sub(t0), p, s.Locked)
			}
			// Has the node asked less than locked throughout [u−w, u] for
			// some u in (at−7 min, at]? Sampled every minute, instants and
			// window being whole minutes.
			for u := at.Add(-6 * time.Minute); !u.After(at); u = u.Add(time.Minute) {
				if u.Before(s.Start) {
					continue
				}
				all := true
				for v := u.UnixNano() - w; v <= u.UnixNano(); v += int64(time.Minute) {
					if a, ok := refAsked(h, v); ok && a >= s.Locked {
						all = false
						break
					}
				}
				lowerStood = lowerStood || all
			}
			if !lowerStood && p != s.Locked {
				t.Fatalf("at %v: %d, but the node never asked less than the locked %d for %v", at.Sub(t0), p, s.Locked, h.Window())
			}
			if lowerStood && p == s.Locked {
				t.Fatalf("at %v: still the locked %d, though a lower price stood for %v", at.Sub(t0), p, h.Window())
			}
			prev = p
		}
	})
}

// Pruning and a JSON round trip change no answer for the sessions they
// keep.
func TestPropertyPruneAndJSONKeepAnswers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := genHistory(t)
		data, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		pruned := new(History)
		if err := json.Unmarshal(data, pruned); err != nil {
			t.Fatal(err)
		}
		before := minutesAfter(t, t0, 3000, "prune before")
		if err := pruned.Prune(before); err != nil {
			t.Fatal(err)
		}
		start := minutesAfter(t, before, 600, "start")
		s, err := h.Lock(start)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := pruned.Lock(start)
		if err != nil {
			t.Fatal(err)
		}
		if ps.Locked != s.Locked {
			t.Fatalf("lock: %d after prune, %d before", ps.Locked, s.Locked)
		}
		for range 5 {
			at := minutesAfter(t, start, 1500, "at")
			p, err1 := h.SessionPrice(s, at)
			pp, err2 := pruned.SessionPrice(s, at)
			if err1 != nil || err2 != nil || p != pp {
				t.Fatalf("at %v: %d (%v) after prune, %d (%v) before", at.Sub(t0), pp, err2, p, err1)
			}
		}
	})
}
