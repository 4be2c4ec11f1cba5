package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// child is a harness child process (this binary with -role) that answers
// commands on its stdin.
type child struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	ready []string
}

// startChild runs exe (empty: this binary) with -role role, on cpus (nil:
// any).
func startChild(exe, role string, upstreams []string, cpus []int) (*child, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("start %s: %w", role, err)
		}
	}
	cmd := exec.Command(exe, "-role", role, "-upstreams", strings.Join(upstreams, ","))
	// A proxy's log is read as a deployment's would be (journald reads
	// stderr): the connections' lines are read and dropped here, the rest
	// passed on.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	cmd.Stderr = pw
	go discardConnectionLines(pr)
	defer pw.Close()
	setDeathSignal(cmd)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	if err := startOn(cmd, cpus); err != nil {
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	line, err := c.line()
	if err != nil || !strings.HasPrefix(line, "ready ") {
		c.stop()
		return nil, fmt.Errorf("start %s: no ready line (%q): %v", role, line, err)
	}
	c.ready = strings.Fields(line)[1:]
	return c, nil
}

// discardConnectionLines reads a child's stderr until EOF, drops the
// lines that log a connection's end, and passes the others on.
func discardConnectionLines(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`msg="connection ended"`)) {
			fmt.Fprintf(os.Stderr, "%s\n", sc.Bytes())
		}
	}
}

func (c *child) line() (string, error) {
	if !c.out.Scan() {
		if err := c.out.Err(); err != nil {
			return "", err
		}
		return "", io.ErrUnexpectedEOF
	}
	return c.out.Text(), nil
}

func (c *child) call(command string) (string, error) {
	if _, err := fmt.Fprintln(c.in, command); err != nil {
		return "", fmt.Errorf("%s: %w", command, err)
	}
	line, err := c.line()
	if err != nil {
		return "", fmt.Errorf("%s: %w", command, err)
	}
	if rest, ok := strings.CutPrefix(line, "error "); ok {
		return "", fmt.Errorf("%s: %s", command, rest)
	}
	return line, nil
}

func (c *child) stats() (runtimeStats, error) {
	var s runtimeStats
	line, err := c.call("stats")
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal([]byte(line), &s)
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop closes the child's stdin, which ends it, and kills it if it has not
// ended within a few seconds.
func (c *child) stop() {
	c.in.Close()
	waitOrKill(c.cmd, 5*time.Second)
}

func waitOrKill(cmd *exec.Cmd, d time.Duration) {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
	}
}

// haproxy is a running HAProxy process.
type haproxy struct {
	cmd    *exec.Cmd
	dir    string
	addr   string
	output bytes.Buffer
	logs   *net.UnixConn // where it logs (option tcplog); nil: no log
}

// haproxyConfig is the reference configuration: HAProxy (Debian
// package haproxy, "mode tcp", "balance leastconn"), as in its reference
// figures "HAProxy 2.6 (nbthread 2, splice-auto)": splicing is left to
// HAProxy's own judgement (in the bulk measurement here it spliced nothing:
// strace showed only recvfrom and sendto). maxconn is capped by the fd
// limit here. The timeouts are the ones HAProxy's documentation asks every tcp
// proxy to set (without them it warns at start); none is reached in a run.
// %[5]s adds "option splice-request" and "option splice-response" for the
// haproxy-force target: splicing every transfer, shown beside the
// reference. %[6]s is the log: by default a line at
// each connection's end ("option tcplog", HAProxy's counterpart of
// pinproxy's default) sent to a Unix datagram socket the harness reads and
// drops, as a local syslog would; the -nolog targets log nothing. %[8]d is
// nbthread: a thread per CPU the proxies run on, as pinproxy runs a loop
// per CPU (2 on this project's build machine, as in the reference).
const haproxyConfig = `global
	maxconn %[1]d
	nbthread %[8]d
%[4]s%[6]s
defaults
	mode tcp
	option splice-auto
%[5]s%[7]s	timeout connect 5s
	timeout client 1h
	timeout server 1h

frontend bench
	bind %[2]s
	default_backend upstreams

backend upstreams
	balance leastconn
%[3]s`

// startHAProxy starts HAProxy in front of upstreams; forceSplice adds
// splice-request and splice-response to splice-auto; logs adds a log line
// for each connection (option tcplog) to a socket the harness reads. It
// runs on cpus, with a thread for each (nil: any CPU, a thread for each of
// the machine's, as pinproxy has a loop for each).
func startHAProxy(bin string, upstreams []string, maxconn, pipesize int, forceSplice, logs bool, cpus []int) (*haproxy, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, fmt.Errorf("haproxy: %w", err)
	}
	dir, err := os.MkdirTemp("", "proxybench-haproxy-")
	if err != nil {
		return nil, fmt.Errorf("haproxy: %w", err)
	}
	var servers strings.Builder
	for i, u := range upstreams {
		fmt.Fprintf(&servers, "\tserver up%d %s\n", i+1, u)
	}
	cfg := dir + "/haproxy.cfg"
	threads := runtime.NumCPU()
	if cpus != nil {
		threads = len(cpus)
	}
	tune := ""
	if pipesize > 0 {
		tune = fmt.Sprintf("\ttune.pipesize %d\n", pipesize)
	}
	force := ""
	if forceSplice {
		force = "\toption splice-request\n\toption splice-response\n"
	}
	h := &haproxy{dir: dir, addr: addr}
	logGlobal, logDefaults := "", ""
	if logs {
		sock := dir + "/log.sock"
		h.logs, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("haproxy: log socket: %w", err)
		}
		go discardDatagrams(h.logs)
		logGlobal = fmt.Sprintf("\tlog %s local0 info\n", sock)
		logDefaults = "\tlog global\n\toption tcplog\n"
	}
	if err := os.WriteFile(cfg, fmt.Appendf(nil, haproxyConfig, maxconn, addr, servers.String(), tune, force, logGlobal, logDefaults, threads), 0o644); err != nil {
		h.closeLogs()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("haproxy: %w", err)
	}
	h.cmd = exec.Command(bin, "-db", "-f", cfg)
	h.cmd.Stdout, h.cmd.Stderr = &h.output, &h.output
	setDeathSignal(h.cmd)
	if err := startOn(h.cmd, cpus); err != nil {
		h.closeLogs()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("haproxy: %w", err)
	}
	exited := make(chan struct{})
	go func() { h.cmd.Process.Wait(); close(exited) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return h, nil
		}
		select {
		case <-exited:
			h.closeLogs()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("haproxy exited at start: %s", h.output.String())
		case <-ctx.Done():
			h.stop()
			return nil, fmt.Errorf("haproxy did not listen on %s within 10s: %s", addr, h.output.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (h *haproxy) pid() int { return h.cmd.Process.Pid }

func (h *haproxy) stop() {
	h.cmd.Process.Kill()
	h.cmd.Process.Wait()
	h.closeLogs()
	os.RemoveAll(h.dir)
}

func (h *haproxy) closeLogs() {
	if h.logs != nil {
		h.logs.Close()
	}
}

// discardDatagrams reads log lines from c and drops them, until c closes.
func discardDatagrams(c *net.UnixConn) {
	b := make([]byte, 64<<10)
	for {
		if _, _, err := c.ReadFrom(b); err != nil {
			return
		}
	}
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// vmRSS reads a process's resident set size, in bytes, from /proc.
func vmRSS(pid int) (int64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, err
	}
	return int64(st.VmRSS), nil
}

// openFDs counts a process's open file descriptors.
func openFDs(pid int) (int, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	return p.FileDescriptorsLen()
}

// machineCPU reads the machine's CPU time from /proc/stat, summed over
// its CPUs, in seconds: busy (everything but idle and iowait) and all.
func machineCPU() (busy, all float64, err error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0, err
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, 0, err
	}
	c := st.CPUTotal
	busy = c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	return busy, busy + c.Idle + c.Iowait, nil
}

// cpuTime reads the CPU time (user + system) a process has used so far,
// from /proc/PID/stat, in clock ticks of 10 ms.
func cpuTime(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(st.UTime+st.STime) * time.Second / clkTck, nil
}
