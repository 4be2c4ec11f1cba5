// Package sdnotify tells systemd a service's state, as sd_notify(3) does,
// in pure Go (no cgo, no libsystemd): one datagram to the unixgram socket
// systemd names in $NOTIFY_SOCKET.
//
//	if s := os.Getenv("NOTIFY_SOCKET"); s != "" {
//		err := sdnotify.Notify(s, "READY=1")
//	}
package sdnotify

import (
	"fmt"
	"net"
	"time"
)

// Notify sends state ("READY=1", "STOPPING=1", "STATUS=…", several
// separated by newlines) to the socket at path. A path starting with "@"
// is a socket in the abstract namespace, as systemd writes it. The write
// has a deadline of 5 s.
func Notify(path, state string) error {
	if path == "" {
		return fmt.Errorf("sdnotify: no socket given")
	}
	addr := &net.UnixAddr{Name: path, Net: "unixgram"}
	if path[0] == '@' {
		addr.Name = "\x00" + path[1:]
	}
	c, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer c.Close()
	if err := c.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sdnotify: send %q to %s: %w", state, path, err)
	}
	return nil
}
