//go:build unix

package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// activated returns the listening sockets systemd passed (socket
// activation, sd_listen_fds(3)): the proxy's, named "proxy" in
// LISTEN_FDNAMES or else the first, and the admin server's, named
// "admin", if any. Both are nil when none were passed to this process.
func activated(lookupEnv func(string) (string, bool)) (proxy, admin net.Listener, err error) {
	pid, _ := lookupEnv("LISTEN_PID")
	if pid != strconv.Itoa(os.Getpid()) {
		return nil, nil, nil // not passed to this process (or to its parent, before an upgrade)
	}
	v, _ := lookupEnv("LISTEN_FDS")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return nil, nil, fmt.Errorf("LISTEN_FDS=%q: want the number of sockets passed, at least 1", v)
	}
	names, _ := lookupEnv("LISTEN_FDNAMES")
	nameOf := strings.Split(names, ":")
	for i := range n {
		name := ""
		if i < len(nameOf) {
			name = nameOf[i]
		}
		f := os.NewFile(uintptr(3+i), "LISTEN_FDS "+name)
		ln, lerr := net.FileListener(f)
		f.Close()
		if lerr != nil {
			return nil, nil, fmt.Errorf("LISTEN_FDS: socket %d (%q): %w", 3+i, name, lerr)
		}
		switch {
		case name == "admin" && admin == nil:
			admin = ln
		case (name == "proxy" || proxy == nil) && name != "admin":
			if proxy != nil {
				proxy.Close()
			}
			proxy = ln
		default:
			ln.Close()
		}
	}
	if proxy == nil {
		return nil, nil, fmt.Errorf("LISTEN_FDS: no socket for the proxy among %d (LISTEN_FDNAMES %q)", n, names)
	}
	return proxy, admin, nil
}
