package pinproxy

import "syscall"

// canAbortConnect: on Linux, shutdown(2) of a socket in SYN_SENT aborts
// its connect.
const canAbortConnect = true

// abortConnect shuts the socket fd down, which aborts a connect under way
// (the socket goes from SYN_SENT to CLOSE, its error ECONNRESET, and a
// wait for it to become writable returns).
func abortConnect(fd uintptr) {
	syscall.Shutdown(int(fd), syscall.SHUT_RDWR)
}
