package pinproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proofkit/nodekit/pinproxy"
)

// waitFor bounds every wait in these tests. It is a safety net against a
// hang, not a speed assertion.
const waitFor = 10 * time.Second

// node is an upstream on loopback that can be stopped and started again on
// the same address. Its handler decides what it speaks.
type node struct {
	t       testing.TB
	name    string
	addr    string
	handler func(n *node, c net.Conn)

	accepts atomic.Int64 // connections accepted, ever

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	ids   map[string]chan struct{} // client id → closed when the id arrives
	wg    sync.WaitGroup
}

// newNode returns a node listening on a fresh loopback port.
func newNode(t testing.TB, name string, handler func(*node, net.Conn)) *node {
	t.Helper()
	n := downNode(t, name, handler)
	n.start()
	return n
}

// downNode returns a node that owns a loopback address but is not
// listening: dials to it are refused until start.
func downNode(t testing.TB, name string, handler func(*node, net.Conn)) *node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	n := &node{t: t, name: name, addr: addr, handler: handler,
		conns: make(map[net.Conn]struct{}), ids: make(map[string]chan struct{})}
	t.Cleanup(n.stop)
	return n
}

func (n *node) start() {
	n.t.Helper()
	ln, err := net.Listen("tcp", n.addr)
	if err != nil {
		n.t.Fatalf("node %s: %v", n.name, err)
	}
	n.mu.Lock()
	n.ln = ln
	n.mu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.accepts.Add(1)
			n.mu.Lock()
			if n.ln != ln { // stopped meanwhile
				n.mu.Unlock()
				c.Close()
				continue
			}
			n.conns[c] = struct{}{}
			n.wg.Add(1)
			n.mu.Unlock()
			go func() {
				defer n.wg.Done()
				n.handler(n, c)
				c.Close()
				n.mu.Lock()
				delete(n.conns, c)
				n.mu.Unlock()
			}()
		}
	}()
}

// stop closes the listener and every connection, like a node going down.
func (n *node) stop() {
	n.mu.Lock()
	if n.ln != nil {
		n.ln.Close()
		n.ln = nil
	}
	for c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// sawID waits until a client announced id to this node.
func (n *node) sawID(id string) bool {
	select {
	case <-n.idChan(id):
		return true
	case <-time.After(waitFor):
		return false
	}
}

func (n *node) idChan(id string) chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.ids[id]
	if !ok {
		ch = make(chan struct{})
		n.ids[id] = ch
	}
	return ch
}

// lineNode speaks a line protocol: "id X" announces the client, any other
// line is answered with "<node name> <line>".
func lineNode(n *node, c net.Conn) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(line, "\n")
		if id, ok := strings.CutPrefix(line, "id "); ok {
			ch := n.idChan(id)
			select {
			case <-ch:
			default:
				close(ch)
			}
			continue
		}
		if _, err := io.WriteString(c, n.name+" "+line+"\n"); err != nil {
			return
		}
	}
}

// echoNode echoes every byte back, and half-closes when the client does.
func echoNode(_ *node, c net.Conn) {
	if _, err := io.Copy(c, c); err == nil {
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
	}
}

// replyNode reads until the client half-closes, then answers with what it
// read, reversed, and closes.
func replyNode(_ *node, c net.Conn) {
	b, err := io.ReadAll(c)
	if err != nil {
		return
	}
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	c.Write(append([]byte("reply:"), b...))
}

// client is a line-protocol client that, like mwebd, redials when its
// connection is closed.
type client struct {
	t     testing.TB
	id    string
	proxy string
	c     net.Conn
	r     *bufio.Reader
}

// dialClient connects through the proxy, announces id, and returns once an
// upstream answered.
func dialClient(t testing.TB, proxy, id string) (*client, string) {
	t.Helper()
	cl := &client{t: t, id: id, proxy: proxy}
	on := cl.redial()
	t.Cleanup(func() { cl.c.Close() })
	return cl, on
}

// redial connects again and returns the name of the node it landed on.
func (cl *client) redial() string {
	cl.t.Helper()
	if cl.c != nil {
		cl.c.Close()
	}
	c, err := net.Dial("tcp", cl.proxy)
	if err != nil {
		cl.t.Fatalf("client %s: %v", cl.id, err)
	}
	cl.c, cl.r = c, bufio.NewReader(c)
	if _, err := io.WriteString(c, "id "+cl.id+"\n"); err != nil {
		cl.t.Fatalf("client %s: %v", cl.id, err)
	}
	on, err := cl.ping()
	if err != nil {
		cl.t.Fatalf("client %s: first ping: %v", cl.id, err)
	}
	return on
}

// ping sends a line and returns the name of the node that answered.
func (cl *client) ping() (string, error) {
	cl.c.SetDeadline(time.Now().Add(waitFor))
	defer cl.c.SetDeadline(time.Time{})
	if _, err := io.WriteString(cl.c, "ping\n"); err != nil {
		return "", err
	}
	line, err := cl.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	name, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	if rest != "ping" {
		return "", errors.New("unexpected answer " + line)
	}
	return name, nil
}

// closed reports whether the proxy closed the connection (EOF or reset
// without anything read).
func (cl *client) closed() bool {
	cl.c.SetReadDeadline(time.Now().Add(waitFor))
	defer cl.c.SetReadDeadline(time.Time{})
	_, err := cl.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// testLogger logs at debug level into a buffer that is printed if the
// test fails.
func testLogger(t testing.TB) (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("proxy log:\n%s", buf)
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// serve starts p on a loopback listener and shuts it down at cleanup,
// checking that Serve returned ErrProxyClosed.
func serve(t testing.TB, p *pinproxy.Proxy) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, pinproxy.ErrProxyClosed) {
			t.Errorf("Serve returned %v, want ErrProxyClosed", err)
		}
	})
	return ln.Addr().String()
}

func newProxy(t testing.TB, cfg pinproxy.Config) *pinproxy.Proxy {
	t.Helper()
	p, err := pinproxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func stat(p *pinproxy.Proxy, addr string) pinproxy.UpstreamStats {
	for _, s := range p.Stats() {
		if s.Addr == addr {
			return s
		}
	}
	return pinproxy.UpstreamStats{}
}

// mustDial connects to addr; the conn is closed at cleanup.
func mustDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedConn reports whether the peer closed c (EOF or reset) before
// sending anything.
func closedConn(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(waitFor))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}
