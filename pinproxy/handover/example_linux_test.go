package handover_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/proofkit/nodekit/pinproxy/handover"
)

// A hand-over of one listening socket between two ends of a socket pair,
// standing in for the old process and the new one (Exec and Inherited
// make that pair between two processes). The new side starts serving
// only once the old one has committed; then the old one lets go.
func Example() {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		panic(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "handover")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			panic(err)
		}
		return c.(*net.UnixConn)
	}
	oldEnd, newEnd := handover.NewPeer(conn(fds[0]), nil), handover.NewPeer(conn(fds[1]), nil)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	rc, _ := ln.(*net.TCPListener).SyscallConn()
	var lfd int
	rc.Control(func(fd uintptr) { lfd = int(fd) })

	adopted := make(chan string, 1)
	go func() { // the new process
		a, err := handover.Adopt(context.Background(), newEnd)
		if err != nil {
			adopted <- err.Error()
			return
		}
		l := a.Listeners[0]
		msg := fmt.Sprintf("adopted %d listener named %q", len(a.Listeners), l.Name)
		err = a.Ready(context.Background(), func() { msg += "; serving" })
		syscall.Close(l.FD)
		if err != nil {
			msg += "; " + err.Error()
		}
		adopted <- msg
	}()
	// The old process: prepare stops what it offers, then describes it.
	rep, err := handover.Handoff(context.Background(), oldEnd, handover.Config{}, func(context.Context) (*handover.Offer, error) {
		return &handover.Offer{Listeners: []handover.Listener{{FD: lfd, Addr: ln.Addr().String(), Name: "proxy"}}}, nil
	})
	fmt.Println(<-adopted)
	fmt.Printf("old side: ready %v, serving %v, err %v\n", rep.Ready, rep.Serving, err)
	// Output:
	// adopted 1 listener named "proxy"; serving
	// old side: ready true, serving true, err <nil>
}
