package testkit

import (
	"os"
	"syscall"
	"testing"
)

// LockHostSysctl serializes, across test binaries, the tests that change
// the host's sysctls for a moment and those that check the host's values
// stay as they were (flock on /tmp/nodekit-host-sysctl.lock): two never
// restore over each other, and a check never sees another test's change.
// It returns the unlock.
func LockHostSysctl(t testing.TB) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile("/tmp/nodekit-host-sysctl.lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }
}
