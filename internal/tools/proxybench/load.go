package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ioTimeout bounds every single client operation, so a broken proxy ends a
// measurement with an error instead of hanging the run.
const ioTimeout = 10 * time.Second

// throughput sends bulk data over streams parallel connections to addr for
// d, then half-closes each and waits for the far end's EOF, which comes back
// only after the sink has read everything. It returns bytes per second over
// the whole time, from the first write to the last EOF.
func throughput(addr string, streams int, d time.Duration) (float64, error) {
	conns := make([]*net.TCPConn, 0, streams)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range streams {
		c, err := net.DialTimeout("tcp", addr, ioTimeout)
		if err != nil {
			return 0, fmt.Errorf("throughput: dial %s: %w", addr, err)
		}
		conns = append(conns, c.(*net.TCPConn))
	}
	var (
		total atomic.Int64
		wg    sync.WaitGroup
		errs  = make([]error, streams)
	)
	start := time.Now()
	end := start.Add(d)
	for i, c := range conns {
		wg.Go(func() {
			c.SetDeadline(end.Add(ioTimeout))
			buf := make([]byte, 128<<10)
			for time.Now().Before(end) {
				n, err := c.Write(buf)
				total.Add(int64(n))
				if err != nil {
					errs[i] = fmt.Errorf("throughput: write: %w", err)
					return
				}
			}
			if err := c.CloseWrite(); err != nil {
				errs[i] = fmt.Errorf("throughput: close write: %w", err)
				return
			}
			if _, err := io.Copy(io.Discard, c); err != nil {
				errs[i] = fmt.Errorf("throughput: wait for the sink's end: %w", err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(total.Load()) / elapsed.Seconds(), nil
}

// ping makes one short connection: connect, write one byte, read the echo,
// close. It is the unit of the connection rate.
func ping(addr string) error {
	c, err := dialEcho(addr)
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

// dialEcho connects to addr, writes one byte and reads its echo, each step
// bounded by ioTimeout; the deadline is left set.
func dialEcho(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(ioTimeout))
	b := [1]byte{'p'}
	if _, err := c.Write(b[:]); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// connRate runs clients concurrent loops of ping against addrs (client i
// uses addrs[i%len(addrs)]) for d, and returns the connections completed
// and failed, and the time they took (d, and the last pings' end).
func connRate(addrs []string, clients int, d time.Duration) (connCount, error) {
	var (
		ok, bad atomic.Int64
		wg      sync.WaitGroup
		first   atomic.Pointer[error]
	)
	start := time.Now()
	end := start.Add(d)
	for i := range clients {
		addr := addrs[i%len(addrs)]
		wg.Go(func() {
			for time.Now().Before(end) {
				if err := ping(addr); err != nil {
					bad.Add(1)
					first.CompareAndSwap(nil, &err)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	c := connCount{ok: ok.Load(), failed: bad.Load(), elapsed: time.Since(start)}
	if c.ok == 0 {
		if e := first.Load(); e != nil {
			return c, fmt.Errorf("connection rate: every connection failed: %w", *e)
		}
		return c, errors.New("connection rate: no connection completed")
	}
	return c, nil
}

// openIdle opens n connections to addr, parallel at a time; each writes one
// byte and reads its echo, so the whole path (through the proxy to the
// upstream and back) has carried data before it goes idle, as a long-lived
// peer connection has. The caller closes the returned connections.
func openIdle(addr string, n, parallel int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range parallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				c, err := openOne(addr)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("idle connection %d: %w", i, err))
					mu.Unlock()
					next.Store(int64(n)) // stop the others
					return
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		closeAll(conns)
		return nil, errs[0]
	}
	return conns, nil
}

func openOne(addr string) (net.Conn, error) {
	c, err := dialEcho(addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}
