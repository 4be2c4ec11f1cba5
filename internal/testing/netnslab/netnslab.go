package netnslab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"sync"
	"time"
)

// PerHolder is how many connections one holder process holds: both ends
// are its own, so 2 × 5,000 descriptors, under the 20,000 a process may
// open here.
const PerHolder = 5000

// Hold is the holder process: it opens n loopback connections to its own
// listener, writes "ready" to out, holds them until stop reaches EOF, then
// resets them. It returns the process's exit code, reporting failures on
// errOut.
func Hold(n int, stop io.Reader, out, errOut io.Writer) int {
	if n <= 0 {
		fmt.Fprintf(errOut, "hold %d connections: want a positive count\n", n)
		return 2
	}
	// No keepalives: 100,000 sockets probing every 15 s would load the box
	// and time the softirqs, not the code measured.
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(errOut, err)
		return 1
	}
	defer ln.Close()
	accepted := make(chan []net.Conn, 1)
	go func() {
		conns := make([]net.Conn, 0, n)
		for len(conns) < n {
			c, err := ln.Accept()
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		accepted <- conns
	}()
	d := net.Dialer{KeepAlive: -1}
	dialed := make([]net.Conn, 0, n)
	for i := range n {
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			fmt.Fprintf(errOut, "dial %d of %d: %v\n", i+1, n, err)
			return 1
		}
		dialed = append(dialed, c)
	}
	conns := <-accepted
	if len(conns) != n {
		fmt.Fprintf(errOut, "accepted %d of %d\n", len(conns), n)
		return 1
	}
	fmt.Fprintln(out, "ready")
	_, _ = io.Copy(io.Discard, stop)
	for _, c := range append(dialed, conns...) {
		// Reset rather than close: no TIME_WAIT sockets stay behind to
		// weigh on the next measurement.
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	return 0
}

// Holder is a running holder process, seen from its parent.
type Holder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
	once   sync.Once
	err    error
}

// Start starts cmd, a process that calls Hold with its stdin and stdout.
// Its stdin, stdout and stderr must be unset.
func Start(cmd *exec.Cmd) (*Holder, error) {
	h := &Holder{cmd: cmd}
	cmd.Stderr = &h.stderr
	var err error
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("start holder: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start holder: %w", err)
	}
	h.stdout = bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start holder: %w", err)
	}
	return h, nil
}

// WaitReady waits until the holder's connections are established.
func (h *Holder) WaitReady() error {
	line, err := h.stdout.ReadString('\n')
	if err != nil || line != "ready\n" {
		return fmt.Errorf("holder said %q, %v: %s", line, err, h.stderr.Bytes())
	}
	return nil
}

// Stop closes the holder's stdin, on which it resets its connections and
// exits, and waits for it, killing it after 10 s. Later calls return the
// first one's result.
func (h *Holder) Stop() error {
	h.once.Do(func() {
		h.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- h.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				h.err = fmt.Errorf("holder: %w: %s", err, h.stderr.Bytes())
			}
		case <-time.After(10 * time.Second):
			h.cmd.Process.Kill()
			h.err = fmt.Errorf("holder still running 10 s after stop, killed: %v: %s", <-done, h.stderr.Bytes())
		}
	})
	return h.err
}
