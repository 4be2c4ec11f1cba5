package pinproxy_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// Many concurrent streams of random bytes come back byte-identical while
// upstreams are killed and restarted under them. A stream cut by a kill is
// retried from the start (the bytes it did get must still be a prefix of
// what was sent); every stream must finish with the same sha256. Afterwards
// no goroutine (goleak in TestMain) and no socket is left.
func TestIntegrityWhileUpstreamsRestart(t *testing.T) {
	const (
		workers   = 16
		perWorker = 4
		maxSize   = 512 << 10
		attempts  = 100
		maxKills  = 30
	)
	// A leaked socket is closed by a finalizer once the GC finds it; with
	// the GC off for this test (some 100 MB), the count below sees it.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	warmNetpoll(t)
	before := openSockets(t)

	nodes := []*pinproxytest.Node{pinproxytest.New(t, "A", pinproxytest.Echo), pinproxytest.New(t, "B", pinproxytest.Echo), pinproxytest.New(t, "C", pinproxytest.Echo)}
	var ups []string
	for _, n := range nodes {
		ups = append(ups, n.Addr)
	}
	log, _ := testLogger(t)
	p := newProxy(t, pinproxy.Config{
		Upstreams:         ups,
		DialTimeout:       2 * time.Second,
		RebalanceInterval: 10 * time.Millisecond,
		FailedBackoff:     20 * time.Millisecond,
		Logger:            log,
	})
	ln, served := listenAndServe(t, p)
	addr := ln.Addr().String()

	// Kill and restart one upstream at a time while the streams run, up to
	// maxKills times, so that on a slow machine the streams still get
	// through in the end.
	stopChaos := make(chan struct{})
	chaosDone := make(chan int)
	go func() {
		kills := 0
		for i := 0; ; i++ {
			if kills == maxKills {
				<-stopChaos
			}
			select {
			case <-stopChaos:
				chaosDone <- kills
				return
			case <-time.After(15 * time.Millisecond):
			}
			n := nodes[i%len(nodes)]
			n.Stop()
			kills++
			time.Sleep(5 * time.Millisecond)
			n.Start()
		}
	}()

	var retries atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range perWorker {
				size, err := rand.Int(rand.Reader, big.NewInt(maxSize))
				if err != nil {
					t.Error(err)
					return
				}
				data := make([]byte, 1+size.Int64())
				rand.Read(data)
				want := sha256.Sum256(data)
				for a := 0; ; a++ {
					if a == attempts {
						t.Errorf("worker %d stream %d: not through after %d attempts", w, s, attempts)
						return
					}
					got, err := echoStream(addr, data)
					if !bytes.Equal(got, data[:len(got)]) {
						t.Errorf("worker %d stream %d: bytes differ from what was sent (%d bytes back)", w, s, len(got))
						return
					}
					if err == nil && len(got) == len(data) && sha256.Sum256(got) == want {
						break
					}
					retries.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stopChaos)
	kills := <-chaosDone
	t.Logf("%d streams through, %d upstream kills, %d streams cut and retried", workers*perWorker, kills, retries.Load())
	if kills == 0 {
		t.Error("no upstream was killed during the streams")
	}

	shutdown(t, p, served)
	for _, n := range nodes {
		n.Stop()
	}
	if runtime.GOOS != "linux" {
		return
	}
	// Compared as sets: a socket an earlier test left behind may close
	// during this one, which is not this test's leak; a socket opened
	// here and still open is.
	var leaked []string
	for s := range openSockets(t) {
		if !before[s] {
			leaked = append(leaked, s)
		}
	}
	if len(leaked) > 0 {
		t.Fatalf("%d sockets opened during the test are still open: %v", len(leaked), leaked)
	}
}

// echoStream sends data through the proxy, half-closes, and returns what
// came back.
func echoStream(addr string, data []byte) ([]byte, error) {
	c, err := net.DialTimeout("tcp", addr, pinproxytest.WaitFor)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(pinproxytest.WaitFor))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	got, rerr := io.ReadAll(c)
	c.Close() // unblocks the writer if the read side ended first
	return got, errors.Join(rerr, <-werr)
}

// warmNetpoll makes the runtime open its poller's descriptors before the
// count starts.
func warmNetpoll(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}

// openSockets returns this process's open sockets, by "socket:[inode]"
// (with the fd, since a socket may be open on several). Pipes are left
// out: the runtime pools splice(2) pipes and closes them from a finalizer,
// so their count depends on the GC. A leaked socket may be closed by a
// finalizer too, but only after a GC that this count does not force.
func openSockets(t *testing.T) map[string]bool {
	set := map[string]bool{}
	if runtime.GOOS != "linux" {
		return set
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			set["fd "+e.Name()+" "+l] = true
		}
	}
	return set
}
