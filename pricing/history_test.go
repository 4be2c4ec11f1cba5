package pricing

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func hours(h float64) time.Time { return t0.Add(time.Duration(h * float64(time.Hour))) }

type change struct {
	at    time.Duration
	price Price
}

func build(t testing.TB, cfg Config, changes ...change) *History {
	t.Helper()
	h, err := NewHistory(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		if err := h.Set(t0.Add(c.at), c.price); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

const (
	hour   = time.Hour
	minute = time.Minute
)

// The worked cases of the pricing rules, and their edges.
func TestSessionPriceWorkedCases(t *testing.T) {
	type at struct {
		t    time.Duration
		want Price
	}
	tests := []struct {
		name    string
		cfg     Config
		changes []change
		start   time.Duration
		locked  Price
		checks  []at
	}{
		{
			name:    "a drop at 1 h reaches at 4 h, not at 3 h 59 m",
			changes: []change{{0, 100}, {1 * hour, 80}},
			locked:  100,
			checks:  []at{{0, 100}, {1 * hour, 100}, {3*hour + 59*minute, 100}, {4*hour - 1, 100}, {4 * hour, 80}, {100 * hour, 80}},
		},
		{
			name:    "a rise never reaches",
			changes: []change{{0, 100}, {1 * hour, 120}},
			locked:  100,
			checks:  []at{{1 * hour, 100}, {4 * hour, 100}, {1000 * hour, 100}},
		},
		{
			name:    "a drop to 50 undone after 2 h never reaches",
			changes: []change{{0, 100}, {1 * hour, 50}, {3 * hour, 100}},
			locked:  100,
			checks:  []at{{3 * hour, 100}, {4 * hour, 100}, {6 * hour, 100}, {100 * hour, 100}},
		},
		{
			name:    "a second drop reaches 3 h after it",
			changes: []change{{0, 100}, {1 * hour, 80}, {2 * hour, 60}},
			locked:  100,
			checks:  []at{{3*hour + 59*minute, 100}, {4 * hour, 80}, {5*hour - 1, 80}, {5 * hour, 60}, {50 * hour, 60}},
		},
		{
			name:    "a drop undone at the instant it would reach never reaches",
			changes: []change{{0, 100}, {1 * hour, 50}, {4 * hour, 100}},
			locked:  100,
			checks:  []at{{4 * hour, 100}, {10 * hour, 100}},
		},
		{
			name:    "a drop undone just after it reached stays",
			changes: []change{{0, 100}, {1 * hour, 50}, {4*hour + 1, 100}},
			locked:  100,
			checks:  []at{{4*hour - 1, 100}, {4 * hour, 50}, {4*hour + 1, 50}, {10 * hour, 50}},
		},
		{
			name:    "a drop partly undone reaches at the highest price it stood at",
			changes: []change{{0, 100}, {1 * hour, 80}, {2 * hour, 90}},
			locked:  100,
			checks:  []at{{4 * hour, 90}, {5 * hour, 90}, {20 * hour, 90}},
		},
		{
			name:    "a price once lowered never rises",
			changes: []change{{0, 100}, {1 * hour, 80}, {5 * hour, 150}, {6 * hour, 100}},
			locked:  100,
			checks:  []at{{4 * hour, 80}, {5 * hour, 80}, {9 * hour, 80}, {20 * hour, 80}},
		},
		{
			name:    "a session started after a drop locks the lower price",
			changes: []change{{0, 100}, {1 * hour, 80}},
			start:   3 * hour,
			locked:  80,
			checks:  []at{{3 * hour, 80}, {4 * hour, 80}, {10 * hour, 80}},
		},
		{
			name:    "a session started after a rise keeps it until a drop has stood",
			changes: []change{{0, 100}, {1 * hour, 120}, {3 * hour, 100}},
			start:   2 * hour,
			locked:  120,
			checks:  []at{{4 * hour, 120}, {6*hour - 1, 120}, {6 * hour, 100}},
		},
		{
			name:    "a drop to zero reaches",
			changes: []change{{0, 100}, {1 * hour, 0}},
			locked:  100,
			checks:  []at{{4*hour - 1, 100}, {4 * hour, 0}},
		},
		{
			name:    "the window is configurable",
			cfg:     Config{Window: 30 * minute},
			changes: []change{{0, 100}, {1 * hour, 80}},
			locked:  100,
			checks:  []at{{1*hour + 29*minute, 100}, {1*hour + 30*minute, 80}},
		},
		{
			name:    "after the last change the price is assumed to stay",
			changes: []change{{0, 100}, {10 * hour, 70}},
			locked:  100,
			checks:  []at{{12 * hour, 100}, {13 * hour, 70}, {1000 * hour, 70}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := build(t, tt.cfg, tt.changes...)
			s, err := h.Lock(t0.Add(tt.start))
			if err != nil {
				t.Fatal(err)
			}
			if s.Locked != tt.locked {
				t.Fatalf("locked %d, want %d", s.Locked, tt.locked)
			}
			for _, c := range tt.checks {
				got, err := h.SessionPrice(s, t0.Add(c.t))
				if err != nil {
					t.Fatalf("at %v: %v", c.t, err)
				}
				if got != c.want {
					t.Errorf("at %v: price %d, want %d", c.t, got, c.want)
				}
				if ref := refSessionPrice(h, s.Locked, s.Start.UnixNano(), t0.Add(c.t).UnixNano()); ref != got {
					t.Errorf("at %v: price %d, the reference says %d", c.t, got, ref)
				}
			}
		})
	}
}

func TestAt(t *testing.T) {
	h := build(t, Config{}, change{0, 100}, change{hour, 80})
	for _, c := range []struct {
		at   time.Duration
		want Price
	}{{0, 100}, {hour - 1, 100}, {hour, 80}, {100 * hour, 80}} {
		got, err := h.At(t0.Add(c.at))
		if err != nil || got != c.want {
			t.Errorf("At(%v) = %d, %v; want %d", c.at, got, err, c.want)
		}
	}
	if _, err := h.At(t0.Add(-1)); !errors.Is(err, ErrNoPrice) {
		t.Errorf("before the first price: %v, want ErrNoPrice", err)
	}
}

func TestErrors(t *testing.T) {
	h := build(t, Config{}, change{0, 100}, change{hour, 80})
	s, err := h.Lock(t0)
	if err != nil {
		t.Fatal(err)
	}
	ended := s
	ended.End = hours(2)
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"a change before the last", h.Set(hours(0.5), 90), ErrOutOfOrder},
		{"a change at the last's instant", h.Set(hours(1), 90), ErrOutOfOrder},
		{"a negative price", h.Set(hours(2), -1), ErrInvalid},
		{"a zero time", h.Set(time.Time{}, 1), ErrInvalid},
		{"a time after 2200", h.Set(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), 1), ErrInvalid},
		{"a lock before the first price", second(h.Lock(hours(-1))), ErrNoPrice},
		{"a lock on an empty history", second(new(History).Lock(t0)), ErrNoPrice},
		{"a price before the session", second(h.SessionPrice(s, hours(-0.5))), ErrOutsideSession},
		{"a price after the session", second(h.SessionPrice(ended, hours(2.5))), ErrOutsideSession},
		{"a negative locked price", second(h.SessionPrice(Session{Start: t0, Locked: -1}, t0)), ErrInvalid},
		{"an end before the start", second(h.SessionPrice(Session{Start: t0, Locked: 1, End: hours(-1)}, t0)), ErrInvalid},
		{"a session before the first price", second(h.SessionPrice(Session{Start: hours(-1), Locked: 1}, t0)), ErrNoPrice},
		{"a negative window", second(NewHistory(Config{Window: -1})), ErrInvalid},
		{"a window too long", second(NewHistory(Config{Window: MaxWindow + 1})), ErrInvalid},
		{"usage after the end", second(h.Charge(ended, []Usage{{At: hours(1), Bytes: 1}, {At: hours(3), Bytes: 1}})), ErrOutsideSession},
		{"usage before the start", second(h.Charge(s, []Usage{{At: hours(-1), Bytes: 1}})), ErrOutsideSession},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	if h.Len() != 2 {
		t.Errorf("refused changes were recorded: %d changes", h.Len())
	}
}

func second[T any](_ T, err error) error { return err }

func TestZeroHistoryHasTheDefaultWindow(t *testing.T) {
	var h History
	if h.Window() != 3*hour {
		t.Fatalf("window %v", h.Window())
	}
	h2, err := NewHistory(Config{})
	if err != nil || h2.Window() != 3*hour {
		t.Fatalf("NewHistory(Config{}): %v, %v", h2.Window(), err)
	}
}

func TestPrune(t *testing.T) {
	var changes []change
	for i := range 100 {
		changes = append(changes, change{time.Duration(i) * hour, Price(100 + (i*37)%50)})
	}
	h := build(t, Config{}, changes...)
	full := build(t, Config{}, changes...)
	if err := h.Prune(hours(50)); err != nil {
		t.Fatal(err)
	}
	// Keeps the change in effect at 47 h and everything after.
	if h.Len() != 53 {
		t.Fatalf("after pruning before 50 h: %d changes, want 53", h.Len())
	}
	for start := 50.0; start < 110; start += 2.5 {
		s, err := h.Lock(hours(start))
		if err != nil {
			t.Fatal(err)
		}
		sf, _ := full.Lock(hours(start))
		if s.Locked != sf.Locked {
			t.Fatalf("lock at %v h: %d, unpruned %d", start, s.Locked, sf.Locked)
		}
		for at := start; at < 120; at += 0.75 {
			p, err := h.SessionPrice(s, hours(at))
			pf, _ := full.SessionPrice(s, hours(at))
			if err != nil || p != pf {
				t.Fatalf("session from %v h at %v h: %d, %v; unpruned %d", start, at, p, err, pf)
			}
		}
	}
	if _, err := h.Lock(hours(49)); !errors.Is(err, ErrPruned) {
		t.Errorf("lock before the prune: %v", err)
	}
	if _, err := h.SessionPrice(Session{Start: hours(49), Locked: 100}, hours(60)); !errors.Is(err, ErrPruned) {
		t.Errorf("price of a session before the prune: %v", err)
	}
	if _, err := h.At(hours(46.9)); !errors.Is(err, ErrPruned) {
		t.Errorf("price before the prune's window: %v", err)
	}
	if _, err := h.At(hours(47)); err != nil {
		t.Errorf("price at the prune's window: %v", err)
	}
	// An earlier prune does nothing; a later one prunes more.
	if err := h.Prune(hours(10)); err != nil || h.Len() != 53 {
		t.Errorf("earlier prune: %d changes, %v", h.Len(), err)
	}
	if err := h.Prune(hours(1000)); err != nil || h.Len() != 1 {
		t.Errorf("prune after the last change: %d changes, %v", h.Len(), err)
	}
	if err := h.Set(hours(1001), 1); err != nil {
		t.Errorf("set after prune: %v", err)
	}
}

// Queries do not modify a history: many goroutines may query one at once
// (run with -race).
func TestConcurrentQueries(t *testing.T) {
	var changes []change
	for i := range 500 {
		changes = append(changes, change{time.Duration(i) * 17 * minute, Price(100 + (i*31)%40 - i/10)})
	}
	h := build(t, Config{}, changes...)
	s, err := h.Lock(hours(1))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]Price, 200)
	for i := range want {
		want[i], _ = h.SessionPrice(s, hours(1+float64(i)/2))
	}
	done := make(chan error)
	for range 4 {
		go func() {
			for i := range want {
				p, err := h.SessionPrice(s, hours(1+float64(i)/2))
				if err == nil && p != want[i] {
					err = errors.New("a concurrent query answered differently")
				}
				if err == nil {
					_, err = h.Charge(s, []Usage{{At: hours(2), Bytes: 1e9}})
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// Setting the price the node already asks changes no session's price.
func TestSamePriceChangesNothing(t *testing.T) {
	a := build(t, Config{}, change{0, 100}, change{hour, 80}, change{3 * hour, 90})
	b := build(t, Config{}, change{0, 100}, change{30 * minute, 100}, change{hour, 80}, change{2 * hour, 80},
		change{3 * hour, 90}, change{4 * hour, 90})
	for start := 0.0; start < 6; start += 0.5 {
		sa, _ := a.Lock(hours(start))
		sb, _ := b.Lock(hours(start))
		for at := start; at < 12; at += 0.25 {
			pa, err1 := a.SessionPrice(sa, hours(at))
			pb, err2 := b.SessionPrice(sb, hours(at))
			if err1 != nil || err2 != nil || pa != pb {
				t.Fatalf("session from %v h at %v h: %d (%v) without repeats, %d (%v) with", start, at, pa, err1, pb, err2)
			}
		}
	}
}

// A session whose locked price was agreed above what the node asks: a
// lower price that began 2 hours before the start has stood 3 hours an
// hour after it.
func TestAgreedLockedPrice(t *testing.T) {
	h := build(t, Config{}, change{-5 * hour, 100}, change{-2 * hour, 80})
	s := Session{Start: t0, Locked: 100}
	for _, c := range []struct {
		at   time.Duration
		want Price
	}{{0, 100}, {hour - 1, 100}, {hour, 80}, {10 * hour, 80}} {
		if p, err := h.SessionPrice(s, t0.Add(c.at)); err != nil || p != c.want {
			t.Errorf("at %v: %d, %v; want %d", c.at, p, err, c.want)
		}
	}
}

// Errors print the wall clock only: a time.Now() passed in carries a
// monotonic reading, which must not show as "m=+…" in what an operator
// reads.
func TestErrorsPrintWallTimes(t *testing.T) {
	h, err := NewHistory(Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := h.Set(now, 10); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{h.Set(now, 9), func() error { _, err := h.At(now.Add(-time.Hour)); return err }()} {
		if err == nil || strings.Contains(err.Error(), "m=") {
			t.Errorf("error %v: want one without the monotonic clock", err)
		}
	}
}
