//go:build !linux

package pinproxy

import (
	"net"
	"sync"
)

// pump copies src to dst until src's EOF (nil) or an error, counting the
// bytes into dir as they are written.
func pump(dst, src net.Conn, _ *sync.Pool, dir *direction) error {
	return copyCounting(dst, src, dir)
}

func newBurstBuf() any { return nil } // not used off Linux

// splicePipe is not used off Linux.
type splicePipe struct{ n int }

func writePipe(net.Conn, *direction) error { return nil }
