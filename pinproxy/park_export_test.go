package pinproxy

import (
	"os"
	"time"
)

// PINPROXY_TEST_PARK=DURATION runs the tests with every proxy's
// connections parked after that much idleness (0: as soon as both
// directions wait), whatever Config.ParkAfter says, unless it is negative:
//
//	PINPROXY_TEST_PARK=0 go test -race ./pinproxy
func init() {
	if v, ok := os.LookupEnv("PINPROXY_TEST_PARK"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			panic("PINPROXY_TEST_PARK=" + v + ": want a duration ≥ 0")
		}
		parkAfterForTests = d
	}
}

// ParkedForTest reports how many of p's connections are parked.
func ParkedForTest(p *Proxy) int {
	return p.park.parkedNow()
}

// ForcedParkForTest reports whether PINPROXY_TEST_PARK is set.
func ForcedParkForTest() bool { return parkAfterForTests >= 0 }
