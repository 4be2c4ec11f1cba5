package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proofkit/nodekit/agent/agenttest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
	"github.com/proofkit/nodekit/overload"
)

// TestReadSkipsHungFile: loadavg is a regular file on a FUSE mount whose
// reads never return, as on a hung network or FUSE file system. The
// first reading runs into its deadline; the later ones skip load (missing,
// with a note that says it is still blocked) and give every other input,
// without a goroutine each: the hang costs one goroutine, however many
// readings are taken. Once the file answers, load comes back.
func TestReadSkipsHungFile(t *testing.T) {
	testkit.NeedRoot(t)
	dir := t.TempDir()
	if err := agenttest.WriteNode(dir, agenttest.Node{MemoryUsedPercent: 40, Load15: 0.3}); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "fuse")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	h := mountHung(t, mnt, "0.10 0.20 0.30 1/100 1234\n")
	loadavg := filepath.Join(agenttest.Proc(dir), "loadavg")
	if err := os.Remove(loadavg); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(mnt, "file"), loadavg); err != nil {
		t.Fatal(err)
	}
	p := newProbe(t, Config{ProcRoot: agenttest.Proc(dir), SysRoot: agenttest.Sys(dir)})

	readWithin := func(d time.Duration) (overload.Reading, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		start := time.Now()
		r, err := p.Read(ctx)
		if took := time.Since(start); took > d+time.Second {
			t.Fatalf("Read took %v with a %v deadline", took, d)
		}
		return r, err
	}
	if _, err := readWithin(500 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first reading on the hung file: err %v, want the deadline", err)
	}
	h.waitHeld(t, 1)
	goroutines := runtime.NumGoroutine()
	for i := range 5 {
		r, err := readWithin(5 * time.Second)
		if err != nil {
			t.Fatalf("reading %d while loadavg hangs: %v", i, err)
		}
		if !slices.Contains(r.Missing, overload.InputLoad) || slices.Contains(r.Missing, overload.InputMemory) {
			t.Fatalf("reading %d: missing %v, want load and not memory (notes %q)", i, r.Missing, r.Notes)
		}
		if len(notesWith(r.Notes, "load: not read: a reading at")) == 0 {
			t.Fatalf("reading %d: notes %q do not say load is still blocked", i, r.Notes)
		}
	}
	if n := runtime.NumGoroutine(); n > goroutines+1 {
		t.Errorf("%d goroutines after five readings past the hang, %d before: one each", n, goroutines)
	}
	if n := h.heldReads(); n != 1 {
		t.Errorf("%d reads of the hung file, want the first reading's alone", n)
	}

	h.answer()
	testkit.WaitFor(t, "load to come back", func() bool {
		r, err := readWithin(5 * time.Second)
		return err == nil && !slices.Contains(r.Missing, overload.InputLoad) && r.Load15 == 0.30
	})
}

// hungFS is a FUSE file system of one regular file, "file", whose reads
// are held unanswered until answer is called: a real hung mount, served
// on /dev/fuse by the test itself.
type hungFS struct {
	t       *testing.T
	dir     string
	fd      int
	content []byte
	done    chan struct{}

	mu   sync.Mutex
	hang bool
	held []heldRead
	all  int // reads held, ever
}

type heldRead struct {
	unique uint64
	off    uint64
	size   uint32
}

// FUSE opcodes and sizes (linux/fuse.h).
const (
	fuseLookup      = 1
	fuseForget      = 2
	fuseGetattr     = 3
	fuseOpen        = 14
	fuseRead        = 15
	fuseRelease     = 18
	fuseFlush       = 25
	fuseInit        = 26
	fuseInterrupt   = 36
	fuseDestroy     = 38
	fuseBatchForget = 42

	fuseInHeader  = 40
	fuseOutHeader = 16
	fuseAttrSize  = 88
	fuseRootID    = 1
	fuseFileID    = 2
)

// mountHung mounts a hungFS at dir, skipping t where FUSE is not there.
// Cleanup answers every held read, unmounts, and waits for the server.
func mountHung(t *testing.T, dir, content string) *hungFS {
	t.Helper()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("skipping: no FUSE here: %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := unix.Mount("nodekit-hung", dir, "fuse.nodekit-hung", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Skipf("skipping: cannot mount FUSE: %v", err)
	}
	h := &hungFS{t: t, dir: dir, fd: fd, content: []byte(content), done: make(chan struct{}), hang: true}
	go h.serve()
	t.Cleanup(h.close)
	return h
}

func (h *hungFS) serve() {
	defer close(h.done)
	buf := make([]byte, 64<<10+4096)
	for {
		n, err := unix.Read(h.fd, buf)
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOENT):
			continue // ENOENT: the request was interrupted before it was read
		case err != nil:
			return // ENODEV once unmounted
		case n < fuseInHeader:
			continue
		}
		h.handle(buf[:n])
	}
}

func (h *hungFS) handle(req []byte) {
	le := binary.LittleEndian
	op, unique, node := le.Uint32(req[4:]), le.Uint64(req[8:]), le.Uint64(req[16:])
	arg := req[fuseInHeader:]
	switch op {
	case fuseInit:
		out := make([]byte, 64)
		le.PutUint32(out[0:], 7)                  // major
		le.PutUint32(out[4:], 31)                 // minor
		le.PutUint32(out[8:], le.Uint32(arg[8:])) // max_readahead
		le.PutUint16(out[16:], 16)                // max_background
		le.PutUint16(out[18:], 12)                // congestion_threshold
		le.PutUint32(out[20:], 64<<10)            // max_write
		le.PutUint32(out[24:], 1)                 // time_gran
		h.reply(unique, 0, out)
	case fuseLookup:
		name, _, _ := strings.Cut(string(arg), "\x00")
		if node != fuseRootID || name != "file" {
			h.reply(unique, -int32(unix.ENOENT), nil)
			return
		}
		out := make([]byte, 40+fuseAttrSize)
		le.PutUint64(out[0:], fuseFileID) // nodeid
		le.PutUint64(out[8:], 1)          // generation
		h.putAttr(out[40:], fuseFileID)
		h.reply(unique, 0, out)
	case fuseGetattr:
		out := make([]byte, 16+fuseAttrSize)
		h.putAttr(out[16:], node)
		h.reply(unique, 0, out)
	case fuseOpen:
		out := make([]byte, 16)
		le.PutUint64(out[0:], 1) // fh
		le.PutUint32(out[8:], 1) // FOPEN_DIRECT_IO: every read comes here
		h.reply(unique, 0, out)
	case fuseRead:
		r := heldRead{unique: unique, off: le.Uint64(arg[8:]), size: le.Uint32(arg[16:])}
		h.mu.Lock()
		if h.hang {
			h.held = append(h.held, r)
			h.all++
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		h.replyRead(r)
	case fuseRelease, fuseFlush, fuseDestroy:
		h.reply(unique, 0, nil)
	case fuseForget, fuseBatchForget, fuseInterrupt:
		// no answer: FORGET takes none; an INTERRUPT may go unanswered
	default:
		h.reply(unique, -int32(unix.ENOSYS), nil)
	}
}

// putAttr writes the attributes of node (the root directory or the file)
// as a struct fuse_attr.
func (h *hungFS) putAttr(b []byte, node uint64) {
	le := binary.LittleEndian
	mode, nlink, size := uint32(unix.S_IFDIR|0o755), uint32(2), uint64(0)
	if node == fuseFileID {
		mode, nlink, size = unix.S_IFREG|0o444, 1, uint64(len(h.content))
	}
	le.PutUint64(b[0:], node) // ino
	le.PutUint64(b[8:], size)
	le.PutUint32(b[60:], mode)
	le.PutUint32(b[64:], nlink)
	le.PutUint32(b[80:], 4096) // blksize
}

func (h *hungFS) replyRead(r heldRead) {
	var data []byte
	if r.off < uint64(len(h.content)) {
		data = h.content[r.off:min(uint64(len(h.content)), r.off+uint64(r.size))]
	}
	h.reply(r.unique, 0, data)
}

func (h *hungFS) reply(unique uint64, errno int32, data []byte) {
	out := make([]byte, fuseOutHeader+len(data))
	binary.LittleEndian.PutUint32(out[0:], uint32(len(out)))
	binary.LittleEndian.PutUint32(out[4:], uint32(errno))
	binary.LittleEndian.PutUint64(out[8:], unique)
	copy(out[fuseOutHeader:], data)
	unix.Write(h.fd, out) // fails only for a request the kernel gave up on
}

// heldReads returns how many reads were ever held.
func (h *hungFS) heldReads() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.all
}

// waitHeld waits until n reads are held.
func (h *hungFS) waitHeld(t *testing.T, n int) {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("%d held reads of the hung file", n), func() bool { return h.heldReads() >= n })
}

// answer stops holding reads and answers those held with the content.
func (h *hungFS) answer() {
	h.mu.Lock()
	h.hang = false
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, r := range held {
		h.replyRead(r)
	}
}

func (h *hungFS) close() {
	h.answer()
	if err := unix.Unmount(h.dir, unix.MNT_DETACH); err != nil {
		h.t.Errorf("unmount %s: %v", h.dir, err)
	}
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.t.Errorf("the FUSE server at %s did not end within 10 s of the unmount", h.dir)
	}
	unix.Close(h.fd)
}
