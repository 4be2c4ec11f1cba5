//go:build !linux

package pinproxy

import (
	"io"
	"net"
)

// pump copies src to dst until src's EOF (nil) or an error.
func pump(dst, src net.Conn) (int64, error) { return io.Copy(dst, src) }
