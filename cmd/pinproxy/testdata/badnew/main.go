// Command badnew stands in for a new pinproxy binary that fails during an
// upgrade, at the step BADNEW_STEP names. It takes the hand-over socket
// the old process passes (PINPROXY_HANDOFF_FD) and keeps every descriptor
// it receives, so that its death closes them:
//
//	silent       says nothing (with BADNEW_SOCKET, it connects there
//	             first, as a new process started with -upgrade-socket does)
//	hello        reads the version, asks, reads the hello, and is SIGKILLed
//	batch        and the first batch
//	have         reads everything, says it has it
//	ready        says it is ready
//	commit       reads the commit (before it says it serves)
//	commit-hang  reads the commit and hangs
//	adopt-panic  adopts with package pinproxy, and panics
//	adopt-hang   adopts with package pinproxy, and hangs (with
//	             BADNEW_SOCKET, from the process listening there)
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/handover"
)

const fd = 3

func main() {
	step := os.Getenv("BADNEW_STEP")
	switch step {
	case "silent":
		if path := os.Getenv("BADNEW_SOCKET"); path != "" {
			c, err := net.Dial("unixpacket", path)
			if err != nil {
				fail(err)
			}
			defer c.Close()
		}
		select {}
	case "adopt-panic", "adopt-hang":
		p, err := pinproxy.New(pinproxy.Config{Upstreams: []string{"127.0.0.1:1"}})
		if err != nil {
			fail(err)
		}
		peer, err := handover.Inherited("PINPROXY_HANDOFF_FD")
		if path := os.Getenv("BADNEW_SOCKET"); path != "" {
			peer, err = handover.Dial(context.Background(), path, handover.Policy{})
		}
		if err != nil || peer == nil {
			fail(fmt.Errorf("no hand-over socket: %v", err))
		}
		if _, err := p.Adopt(context.Background(), peer); err != nil {
			fail(err)
		}
		if step == "adopt-panic" {
			panic("badnew: a new binary that panics right after adopting")
		}
		select {}
	}
	recv('V')
	send(fmt.Sprintf(`Q{"version":%d,"pid":%d}`, handover.Version, os.Getpid()))
	recv('H')
	if step == "hello" {
		die()
	}
	for {
		kind := recv(0)
		if step == "batch" {
			die()
		}
		if kind == 'E' {
			break
		}
	}
	send(`A{}`)
	if step == "have" {
		die()
	}
	send(fmt.Sprintf(`R{"pid":%d}`, os.Getpid()))
	if step == "ready" {
		die()
	}
	recv('C')
	if step == "commit" {
		die()
	}
	select {} // commit-hang
}

func send(msg string) {
	if _, err := syscall.Write(fd, []byte(msg)); err != nil {
		fail(err)
	}
}

// recv reads one message, keeping its descriptors, and returns its kind.
func recv(want byte) byte {
	buf := make([]byte, 1<<19)
	oob := make([]byte, 1<<14)
	n, _, _, _, err := syscall.Recvmsg(fd, buf, oob, 0)
	if err != nil || n == 0 {
		fail(fmt.Errorf("recvmsg: %v (%d bytes)", err, n))
	}
	if want != 0 && buf[0] != want {
		fail(fmt.Errorf("got %q, want %q", buf[0], want))
	}
	return buf[0]
}

func die() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "badnew:", err)
	os.Exit(4)
}
