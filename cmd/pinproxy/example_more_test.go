package main

import (
	"fmt"

	"github.com/proofkit/nodekit/internal/cmdkit"
)

// Every flag may also come from the environment, under this name; a flag
// given on the command line wins.
func Example_envName() {
	for _, f := range []string{"listen", "upstreams", "rebalance-interval", "dial-timeout"} {
		fmt.Printf("-%s\t%s\n", f, cmdkit.EnvName(envPrefix, f))
	}
	// Output:
	// -listen	PINPROXY_LISTEN
	// -upstreams	PINPROXY_UPSTREAMS
	// -rebalance-interval	PINPROXY_REBALANCE_INTERVAL
	// -dial-timeout	PINPROXY_DIAL_TIMEOUT
}
