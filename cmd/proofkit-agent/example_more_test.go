package main

import "fmt"

// -link-speed gives the speeds the kernel does not know (a veth, a WireGuard
// link), in Mbit/s, or in Gbit/s with G.
func Example_parseLinkSpeeds() {
	speeds, err := parseLinkSpeeds("eth0=1000,wg0=10G")
	fmt.Println(speeds["eth0"], speeds["wg0"], err)
	_, err = parseLinkSpeeds("eth0=fast")
	fmt.Println(err)
	// Output:
	// 1000 10000 <nil>
	// "eth0=fast": speed is not a positive whole number
}
