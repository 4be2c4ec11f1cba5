//go:build !linux

package main

import (
	"errors"
	"fmt"
)

// floorProxy is the epoll floor (floor_linux.go); it runs on Linux only.
type floorProxy struct{}

func serveFloor([]string) (*floorProxy, error) {
	return nil, fmt.Errorf("floor: %w (it is an epoll proxy)", errors.ErrUnsupported)
}

func (*floorProxy) addr() string { return "" }
func (*floorProxy) stop()        {}
