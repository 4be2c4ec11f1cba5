package main

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// checkNetNS says whether f, opened as the probe opens it, is a network
// namespace: a bind mount of one (/run/netns/NAME) or /proc/PID/ns/net.
func checkNetNS(f *os.File) error {
	typ, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	switch {
	case errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EINVAL):
		return errors.New("not a namespace")
	case err != nil:
		return err
	case typ != unix.CLONE_NEWNET:
		return errors.New("a namespace, but not a network one")
	}
	return nil
}
