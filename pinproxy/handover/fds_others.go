//go:build !unix

package handover

import (
	"errors"
	"fmt"
	"net"
	"os"
)

var errClosed = errors.New("handover: the other process closed the socket")

func sendMsg(*net.UnixConn, []byte, []int) error { return unsupported("sending descriptors") }

func recvRaw(*net.UnixConn) ([]byte, []int, error) {
	return nil, nil, unsupported("receiving descriptors")
}

func recvMsg(*net.UnixConn, byte, any) ([]int, error) {
	return nil, unsupported("receiving descriptors")
}

func closeFDs([]int) {}

func setBuffer(*net.UnixConn) {}

func unsupported(what string) error {
	return fmt.Errorf("handover: %s: %w", what, errors.ErrUnsupported)
}

func socketPair() (*net.UnixConn, *os.File, error) { return nil, nil, unsupported("socketpair") }
