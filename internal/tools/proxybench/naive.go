package main

import (
	"io"
	"net"
	"sync/atomic"
)

// serveNaive is the reference line "naive Go proxy, 2 goroutines per
// connection": round-robin upstreams, io.Copy both ways (so Go splices),
// half-close carried through. Each direction's io.Copy holds a splice pipe
// (2 fds) while it waits for data, idle or not.
func serveNaive(ln net.Listener, upstreams []string) error {
	var next atomic.Uint64
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		up := upstreams[next.Add(1)%uint64(len(upstreams))]
		go naiveConn(c.(*net.TCPConn), up)
	}
}

func naiveConn(client *net.TCPConn, upstream string) {
	defer client.Close()
	c, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	up := c.(*net.TCPConn)
	defer up.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(up, client)
		up.CloseWrite()
		close(done)
	}()
	io.Copy(client, up)
	client.CloseWrite()
	<-done
}
