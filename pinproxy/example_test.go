package pinproxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/proofkit/nodekit/pinproxy"
)

func ExampleNew_badUpstream() {
	_, err := pinproxy.New(pinproxy.Config{Upstreams: []string{"eu-01:9333", "usa-01"}})
	fmt.Println(err)
	// Output: pinproxy: upstream 2 "usa-01": missing port in address, want host:port
}

func ExampleProxy_Serve() {
	// An upstream that answers "hello" and closes.
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "hello")
			c.Close()
		}
	}()

	p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{up.Addr().String()}})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	fmt.Printf("%s\n", b)

	p.Shutdown(context.Background())
	fmt.Println(<-done)
	fmt.Println(p.Stats()[0].Dials, "dial,", p.Stats()[0].Live, "live")
	// Output:
	// hello
	// pinproxy: proxy closed
	// 1 dial, 0 live
}

// The pull request's case: node B is down while two clients connect, so both land
// on A. Rounds close nothing while B is down; once B answers, one round
// moves the newer connection, and the client's redial lands on B.
func ExampleProxy_Rebalance() {
	a := holdingNode("127.0.0.1:0")
	defer a.Close()
	b := holdingNode("127.0.0.1:0")
	bAddr := b.Addr().String()
	b.Close() // B is down

	names := map[string]string{a.Addr().String(): "A", bAddr: "B"}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, at slog.Attr) slog.Attr {
			switch at.Key {
			case slog.TimeKey, "err", "client":
				return slog.Attr{}
			case "from", "to", "upstream":
				return slog.String(at.Key, names[at.Value.String()])
			}
			return at
		},
	}))
	p, err := pinproxy.New(pinproxy.Config{
		Upstreams:         []string{a.Addr().String(), bAddr},
		RebalanceInterval: -1, // rounds by hand here
		Logger:            log,
	})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()

	var clients []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			panic(err)
		}
		clients = append(clients, c)
		for p.Stats()[0].Live != len(clients) { // pinned to A
			time.Sleep(time.Millisecond)
		}
	}
	fmt.Println("A holds", p.Stats()[0].Live)

	p.Rebalance(context.Background()) // B still down: nothing moves
	b = holdingNode(bAddr)            // B answers again
	defer b.Close()
	p.Rebalance(context.Background())

	_, err = clients[1].Read(make([]byte, 1))
	fmt.Println("newer client:", err)
	fmt.Println("A holds", p.Stats()[0].Live, "B holds", p.Stats()[1].Live)

	for _, c := range clients {
		c.Close()
	}
	p.Shutdown(context.Background())
	<-done
	// Output:
	// level=WARN msg="upstream does not answer; trying the next" upstream=B
	// A holds 2
	// level=INFO msg="idle node still does not answer; nothing moved" from=A to=B
	// level=INFO msg="answers again; moving a connection" from=A to=B
	// newer client: EOF
	// A holds 1 B holds 0
}

// holdingNode listens on addr and holds every connection open until the
// peer closes it.
func holdingNode(addr string) net.Listener {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	return ln
}

// An upstreams file, as -upstreams-file and a reload read it; a bad entry
// names its line.
func ExampleParseUpstreams() {
	ups, err := pinproxy.ParseUpstreams(strings.NewReader("# MWEB peers\neu-01:9333\nusa-01:9333  # fallback\n"))
	fmt.Println(ups, err)
	_, err = pinproxy.ParseUpstreams(strings.NewReader("eu-01:9333\nusa 01:9333\n"))
	fmt.Println(err)
	// Output:
	// [eu-01:9333 usa-01:9333] <nil>
	// pinproxy: line 2: "usa 01:9333": host has a space in it
}

// The connection cap that fits an open-file limit: two descriptors a
// client, and a reserve for everything else.
func ExampleMaxConnsForFiles() {
	for _, n := range []uint64{1024, 20000, 65536} {
		fmt.Println(n, pinproxy.MaxConnsForFiles(n))
	}
	// Output:
	// 1024 486
	// 20000 9500
	// 65536 31130
}

// A reload: the new list is the new order of preference; an upstream taken
// out stays in Stats, marked removed, while it has connections, and a bad
// list changes nothing.
func ExampleProxy_SetUpstreams() {
	p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{"eu-01:9333", "usa-01:9333"}})
	if err != nil {
		panic(err)
	}
	fmt.Println(p.SetUpstreams([]string{"usa-01:9333", "eu-02:9333"}))
	fmt.Println(p.SetUpstreams([]string{"usa-01:9333", "usa-01:9333"}))
	for _, u := range p.Stats() {
		fmt.Println(u.Addr, u.State, u.Removed)
	}
	// Output:
	// <nil>
	// pinproxy: upstream 2 "usa-01:9333": listed twice (also upstream 1)
	// usa-01:9333 unknown false
	// eu-02:9333 unknown false
}

// withoutTime writes lines without their first field (time=…), so that
// an example's output does not change from run to run.
type withoutTime struct{ w io.Writer }

func (t withoutTime) Write(b []byte) (int, error) {
	_, rest, _ := bytes.Cut(b, []byte(" "))
	_, err := t.w.Write(rest)
	return len(b), err
}

// NewLogHandler writes what slog's text handler writes; given as the
// proxy's logger's handler, it lets the proxy write each connection's line
// itself, without allocating.
func ExampleNewLogHandler() {
	log := slog.New(pinproxy.NewLogHandler(withoutTime{os.Stdout}, slog.LevelInfo))
	log.Info("pinproxy listening", "addr", "127.0.0.1:9333")
	log.Debug("not written: below the level")
	if _, err := pinproxy.New(pinproxy.Config{Upstreams: []string{"127.0.0.1:9001"}, LogConnections: true, Logger: log}); err != nil {
		fmt.Println(err)
	}
	// Output:
	// level=INFO msg="pinproxy listening" addr=127.0.0.1:9333
}

// An upstream that accepts connections and closes them at once, as a node
// does that banned the proxy's address, is refusing sessions after three
// in a row (Config.RefusedSessions): Stats says why, and it is tried
// after every other upstream.
func ExampleUpstreamStats_refusing() {
	banning := closingNode()
	defer banning.Close()
	b := holdingNode("127.0.0.1:0")
	defer b.Close()
	p, err := pinproxy.New(pinproxy.Config{
		Upstreams:         []string{banning.Addr().String(), b.Addr().String()},
		RebalanceInterval: -1,
	})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()

	for range 3 { // each lands on the first listed, which ends it at once
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			panic(err)
		}
		io.Copy(io.Discard, c) // until the upstream's end reaches the client
		c.Close()
		for p.Totals().Live != 0 {
			time.Sleep(time.Millisecond)
		}
	}
	s := p.Stats()[0]
	fmt.Println(s.State, s.RefusedSessions, strings.HasPrefix(s.Refusing, "refusing sessions: 3 ended within "))

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	for p.Stats()[1].Live != 1 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("the next client is on the second upstream")
	c.Close()
	p.Shutdown(context.Background())
	<-done
	// Output:
	// down 3 true
	// the next client is on the second upstream
}

// closingNode accepts connections and closes each at once.
func closingNode() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln
}
