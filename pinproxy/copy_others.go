//go:build !linux

package pinproxy

import (
	"io"
	"net"
	"sync"
)

// pump copies src to dst until src's EOF (nil) or an error.
func pump(dst, src net.Conn, _ *sync.Pool) (int64, error) { return io.Copy(dst, src) }

func newBurstBuf() any { return nil } // not used off Linux
