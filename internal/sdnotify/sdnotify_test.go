package sdnotify_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/sdnotify"
)

// listen opens a real unixgram socket, as systemd does for a Type=notify
// service, and returns what arrives on it.
func listen(t *testing.T, name string) <-chan string {
	t.Helper()
	addr := &net.UnixAddr{Name: name, Net: "unixgram"}
	if name[0] == '@' {
		addr.Name = "\x00" + name[1:]
	}
	c, err := net.ListenUnixgram("unixgram", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(buf[:n])
	}()
	return got
}

func TestNotifyPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	got := listen(t, path)
	if err := sdnotify.Notify(path, "READY=1\nSTATUS=ok"); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g != "READY=1\nSTATUS=ok" {
		t.Errorf("the socket received %q", g)
	}
}

func TestNotifyAbstract(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("skipping: abstract sockets are Linux's")
	}
	name := fmt.Sprintf("@nodekit-ops-sdnotify-%d", os.Getpid())
	got := listen(t, name)
	if err := sdnotify.Notify(name, "READY=1"); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g != "READY=1" {
		t.Errorf("the socket received %q", g)
	}
}

func TestNotifyNoListener(t *testing.T) {
	err := sdnotify.Notify(filepath.Join(t.TempDir(), "none"), "READY=1")
	if err == nil {
		t.Fatal("no error sending to a socket nobody listens on")
	}
	if err := sdnotify.Notify("", "READY=1"); err == nil {
		t.Fatal("no error for an empty socket path")
	}
}
