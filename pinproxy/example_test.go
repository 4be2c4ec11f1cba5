package pinproxy_test

import (
	"context"
	"fmt"
	"io"
	"net"

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
