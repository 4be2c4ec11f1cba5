// Command halfway stands in for a new pinproxy binary that dies half-way
// through an upgrade: it takes the hand-over socket pinproxy passes, reads
// the hello and two batches of connections, and kills itself with SIGKILL.
package main

import (
	"os"
	"syscall"
)

func main() {
	buf := make([]byte, 1<<18)
	oob := make([]byte, 1<<14)
	for range 3 {
		if _, _, _, _, err := syscall.Recvmsg(3, buf, oob, 0); err != nil {
			os.Exit(4)
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
