package main

import "net"

// servePinproxy serves ln with pinproxy in front of upstreams and returns a
// function that stops it.
func servePinproxy(ln net.Listener, upstreams []string) (stop func(), err error) {
	return nil, errNoPinproxy
}
