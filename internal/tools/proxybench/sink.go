package main

import (
	"net"
	"os"
)

// sink is the upstream of every measurement: two discard listeners for bulk
// data and two echo listeners for short and idle connections. Two of each,
// so a proxy has two upstreams to choose from, as with least-used dialing.
type sink struct {
	bulk, echo []net.Listener
}

func startSink() (*sink, error) {
	s := &sink{}
	for _, l := range []*[]net.Listener{&s.bulk, &s.bulk, &s.echo, &s.echo} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.close()
			return nil, err
		}
		*l = append(*l, ln)
	}
	for _, ln := range s.bulk {
		go acceptLoop(ln, discard)
	}
	for _, ln := range s.echo {
		go acceptLoop(ln, echo)
	}
	return s, nil
}

func (s *sink) bulkAddrs() []string { return addrs(s.bulk) }
func (s *sink) echoAddrs() []string { return addrs(s.echo) }

func (s *sink) close() {
	for _, ln := range append(s.bulk, s.echo...) {
		ln.Close()
	}
}

func addrs(lns []net.Listener) []string {
	out := make([]string, len(lns))
	for i, ln := range lns {
		out[i] = ln.Addr().String()
	}
	return out
}

func acceptLoop(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go handle(c)
	}
}

// discard reads until EOF, then closes, which tells the writer (through any
// proxy) that everything arrived. It splices into /dev/null where it can
// (os.File.ReadFrom does), so the sink spends little of the CPU the proxy
// under test needs; the same for every target.
func discard(c net.Conn) {
	defer c.Close()
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		defer null.Close()
		if _, err := null.ReadFrom(c); err == nil {
			return
		}
	}
	buf := make([]byte, 256<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// echo writes back what it reads until EOF, then closes.
func echo(c net.Conn) {
	defer c.Close()
	var buf [64]byte
	for {
		n, err := c.Read(buf[:])
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
