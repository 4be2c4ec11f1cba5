package pinproxy

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// PINPROXY_TEST_PARK=DURATION runs the tests with the connections of every
// proxy made by the tests' newProxy parked after that much idleness (0: as
// soon as both directions wait), whatever Config.ParkAfter says, unless it
// is negative:
//
//	PINPROXY_TEST_PARK=0 go test -race ./pinproxy
var forcedPark = func() time.Duration {
	v, ok := os.LookupEnv("PINPROXY_TEST_PARK")
	if !ok {
		return -1
	}
	d, err := parseTestPark(v)
	if err != nil {
		panic(err)
	}
	return d
}()

// parseTestPark reads PINPROXY_TEST_PARK's value.
func parseTestPark(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("PINPROXY_TEST_PARK=%s: want a duration ≥ 0", v)
	}
	return d, nil
}

func TestParseTestPark(t *testing.T) {
	for v, want := range map[string]time.Duration{"0": 0, "0s": 0, "250ms": 250 * time.Millisecond} {
		if d, err := parseTestPark(v); err != nil || d != want {
			t.Errorf("parseTestPark(%q) = %v, %v; want %v", v, d, err, want)
		}
	}
	for _, v := range []string{"", "-1s", "soon"} {
		if _, err := parseTestPark(v); err == nil {
			t.Errorf("parseTestPark(%q) accepted", v)
		}
	}
}

// ParkedForTest reports how many of p's connections are parked.
func ParkedForTest(p *Proxy) int {
	return p.park.parkedNow()
}

// ForcedParkForTest returns the ParkAfter PINPROXY_TEST_PARK asks for
// (under a millisecond for 0: parked as soon as both directions wait), and
// whether it is set.
func ForcedParkForTest() (time.Duration, bool) {
	if forcedPark < 0 {
		return 0, false
	}
	return max(forcedPark, time.Nanosecond), true
}

// PINPROXY_TEST_GOROUTINES=1 runs the tests with the connections of
// every proxy made by the tests' newProxy relayed by goroutines (the path
// of other systems, and of conns that are not *net.TCPConn) rather than by
// event loops:
//
//	PINPROXY_TEST_GOROUTINES=1 go test -race ./pinproxy
var forcedGoroutines = os.Getenv("PINPROXY_TEST_GOROUTINES") == "1"

// ForcedGoroutinesForTest makes cfg's proxy relay with goroutines if
// PINPROXY_TEST_GOROUTINES=1 asks for it.
func ForcedGoroutinesForTest(cfg *Config) {
	if forcedGoroutines {
		cfg.goroutines = true
	}
}

// GoroutinesForcedForTest reports whether PINPROXY_TEST_GOROUTINES=1 is
// set.
func GoroutinesForcedForTest() bool { return forcedGoroutines }

// SetClockForTest makes the proxy New makes from cfg take its decisions
// (back-off, slow start, drains, Ready) at the times now returns.
func SetClockForTest(cfg *Config, now func() time.Time) { cfg.clock = now }
