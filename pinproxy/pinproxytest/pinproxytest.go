// Package pinproxytest provides upstream nodes that can go down and come
// back, and clients that redial like mwebd, on loopback, for testing
// pinproxy and programs built on it with real sockets.
package pinproxytest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// WaitFor bounds every wait in these helpers. It is a safety net against a
// hang, not a speed assertion: the bound nodekit's own tests use.
const WaitFor = testkit.Timeout

// Handler serves one connection accepted by a Node.
type Handler func(n *Node, c net.Conn)

// Node is an upstream on loopback that can be stopped and started again on
// the same address. Its handler decides what it speaks.
type Node struct {
	Name    string
	Addr    string
	Accepts atomic.Int64 // connections accepted, ever

	t       testing.TB
	handler Handler

	mu    sync.Mutex
	held  *held // the port, bound but not listening, from Down until Start
	ln    net.Listener
	conns map[net.Conn]struct{}
	ids   map[string]chan struct{} // client id → closed when the id arrives
	wg    sync.WaitGroup
}

// New returns a node listening on a fresh loopback port; it stops at cleanup.
func New(t testing.TB, name string, h Handler) *Node {
	t.Helper()
	n := Down(t, name, h)
	n.Start()
	return n
}

// Down returns a node that owns a loopback address but is not listening:
// dials to it are refused until Start. Until then it holds the port, so
// that no other socket, in this process or another, can take it (see
// held); once it has been started, Stop frees the port, as a node going
// down would.
func Down(t testing.TB, name string, h Handler) *Node {
	t.Helper()
	hd, err := hold()
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{t: t, Name: name, Addr: hd.addr, handler: h, held: hd,
		conns: make(map[net.Conn]struct{}), ids: make(map[string]chan struct{})}
	t.Cleanup(func() {
		n.Stop()
		n.mu.Lock()
		if n.held != nil {
			n.held.release()
			n.held = nil
		}
		n.mu.Unlock()
	})
	return n
}

// Start listens on the node's address. It may be called from any
// goroutine (tests restart nodes from background loops): a failure to
// listen is reported with t.Errorf, which, unlike t.Fatalf, is safe off
// the test's goroutine, and the node stays stopped.
func (n *Node) Start() {
	n.t.Helper()
	n.mu.Lock()
	hd := n.held
	n.held = nil
	n.mu.Unlock()
	var ln net.Listener
	var err error
	if hd != nil {
		ln, err = hd.listen()
	} else {
		ln, err = net.Listen("tcp", n.Addr)
	}
	if err != nil {
		n.t.Errorf("node %s: %v", n.Name, err)
		return
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
			n.Accepts.Add(1)
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

// Stop closes the listener and every connection, like a node going down,
// and waits for its goroutines.
func (n *Node) Stop() {
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

// SawID waits until a client announced id to this node.
func (n *Node) SawID(id string) bool {
	select {
	case <-n.idChan(id):
		return true
	case <-time.After(WaitFor):
		return false
	}
}

func (n *Node) idChan(id string) chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.ids[id]
	if !ok {
		ch = make(chan struct{})
		n.ids[id] = ch
	}
	return ch
}

// Line speaks a line protocol: "id X" announces the client, any other line
// is answered with "<node name> <line>".
func Line(n *Node, c net.Conn) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(line, "\n")
		if id, ok := strings.CutPrefix(line, "id "); ok {
			ch := n.idChan(id)
			n.mu.Lock() // two clients may announce the same id at once
			select {
			case <-ch:
			default:
				close(ch)
			}
			n.mu.Unlock()
			continue
		}
		if _, err := io.WriteString(c, n.Name+" "+line+"\n"); err != nil {
			return
		}
	}
}

// Echo echoes every byte back, and half-closes when the client does.
func Echo(_ *Node, c net.Conn) {
	if _, err := io.Copy(c, c); err == nil {
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
	}
}

// Reply reads until the client half-closes, then answers "reply:" and what
// it read, reversed, and closes.
func Reply(_ *Node, c net.Conn) {
	b, err := io.ReadAll(c)
	if err != nil {
		return
	}
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	c.Write(append([]byte("reply:"), b...))
}

// Client is a Line-protocol client that, like mwebd, redials when its
// connection is closed (the test calls Redial).
type Client struct {
	ID    string
	Proxy string
	Conn  net.Conn

	t testing.TB
	r *bufio.Reader
}

// Dial connects through the proxy, announces id, and returns once an
// upstream answered, with the name of that upstream. The connection is
// closed at cleanup.
func Dial(t testing.TB, proxy, id string) (*Client, string) {
	t.Helper()
	cl := &Client{t: t, ID: id, Proxy: proxy}
	on := cl.Redial()
	t.Cleanup(func() { cl.Conn.Close() })
	return cl, on
}

// Redial connects again and returns the name of the node it landed on.
func (cl *Client) Redial() string {
	cl.t.Helper()
	if cl.Conn != nil {
		cl.Conn.Close()
	}
	c, err := net.DialTimeout("tcp", cl.Proxy, WaitFor)
	if err != nil {
		cl.t.Fatalf("client %s: %v", cl.ID, err)
	}
	cl.Conn, cl.r = c, bufio.NewReader(c)
	if _, err := io.WriteString(c, "id "+cl.ID+"\n"); err != nil {
		cl.t.Fatalf("client %s: %v", cl.ID, err)
	}
	on, err := cl.Ping()
	if err != nil {
		cl.t.Fatalf("client %s: first ping: %v", cl.ID, err)
	}
	return on
}

// Ping sends a line and returns the name of the node that answered.
func (cl *Client) Ping() (string, error) {
	cl.Conn.SetDeadline(time.Now().Add(WaitFor))
	defer cl.Conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(cl.Conn, "ping\n"); err != nil {
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

// Closed reports whether the connection was closed by the other end (EOF
// or reset) before anything more arrived.
func (cl *Client) Closed() bool {
	cl.Conn.SetReadDeadline(time.Now().Add(WaitFor))
	defer cl.Conn.SetReadDeadline(time.Time{})
	_, err := cl.r.ReadByte()
	return err != nil && !IsTimeout(err)
}

// ClosedConn reports whether the peer closed c (EOF or reset) before
// sending anything.
func ClosedConn(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(WaitFor))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(make([]byte, 1))
	return err != nil && !IsTimeout(err)
}

// IsTimeout reports whether err is a timeout.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
