package logbuf_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/logbuf"
	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// syncBuffer is an output the test can read while the writer writes.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// A line written with no flush reaches the output within the interval by
// itself, many lines in one write.
func TestFlushedEveryInterval(t *testing.T) {
	var out syncBuffer
	w := logbuf.New(&out, logbuf.Config{FlushInterval: 20 * time.Millisecond})
	defer w.Close()
	for i := range 100 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	testkit.WaitFor(t, "the lines to be written out", func() bool { return strings.Count(out.String(), "\n") == 100 })
	if n := out.Writes(); n > 2 {
		t.Errorf("100 lines took %d writes, want 1 or 2", n)
	}
}

// The default interval is 100 ms: a line is out by itself well within a
// second, with nobody calling Flush.
func TestDefaultInterval(t *testing.T) {
	var out syncBuffer
	w := logbuf.New(&out, logbuf.Config{})
	defer w.Close()
	start := time.Now()
	w.Write([]byte("one\n"))
	testkit.WaitFor(t, "the line", func() bool { return out.String() == "one\n" })
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the line took %v", d)
	}
}

// A full buffer is written out at once, not at the next tick.
func TestFlushedWhenFull(t *testing.T) {
	var out syncBuffer
	w := logbuf.New(&out, logbuf.Config{FlushInterval: time.Hour, Size: 100})
	defer w.Close()
	line := []byte(strings.Repeat("x", 39) + "\n")
	w.Write(line)
	w.Write(line)
	w.Write(line) // does not fit: the first two go out
	testkit.WaitFor(t, "the full buffer to be written out", func() bool { return strings.Count(out.String(), "\n") >= 2 })
	w.Flush()
	if got := strings.Count(out.String(), "\n"); got != 3 {
		t.Errorf("after Flush: %d lines out, want 3", got)
	}
}

// blockingWriter blocks every write until released.
type blockingWriter struct {
	release chan struct{}
	blocked atomic.Bool // a write is waiting for release
	syncBuffer
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.blocked.Store(true)
	<-b.release
	return b.syncBuffer.Write(p)
}

// Blocked says whether a write has waited for release.
func (b *blockingWriter) Blocked() bool {
	return b.blocked.Load()
}

// An output that does not take lines never blocks Write: the lines that
// do not fit are dropped and counted, and the rest come out in order.
func TestSlowOutputDropsNeverBlocks(t *testing.T) {
	out := &blockingWriter{release: make(chan struct{})}
	w := logbuf.New(out, logbuf.Config{FlushInterval: time.Millisecond, Size: 1000})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10000 {
			fmt.Fprintf(w, "line %05d\n", i) // 11 bytes
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Write blocked on a blocked output")
	}
	if d := w.Dropped(); d < 10000-2*1000/11 {
		t.Errorf("dropped %d lines, want at least %d", d, 10000-2*1000/11)
	}
	close(out.release)
	w.Close()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if int64(len(lines))+w.Dropped() != 10000 {
		t.Errorf("%d lines out + %d dropped, want 10000", len(lines), w.Dropped())
	}
	for i := 1; i < len(lines); i++ {
		if lines[i] <= lines[i-1] {
			t.Fatalf("line %q after %q: out of order", lines[i], lines[i-1])
		}
	}
}

// Close writes out what is buffered; a line after Close goes straight out.
func TestClose(t *testing.T) {
	var out syncBuffer
	w := logbuf.New(&out, logbuf.Config{FlushInterval: time.Hour})
	w.Write([]byte("a\n"))
	w.Close()
	if got := out.String(); got != "a\n" {
		t.Fatalf("after Close: %q, want %q", got, "a\n")
	}
	w.Write([]byte("b\n"))
	if got := out.String(); got != "a\nb\n" {
		t.Fatalf("a write after Close: %q, want %q", got, "a\nb\n")
	}
	w.Close() // twice is fine
}

// CloseWithin writes out what is buffered, as Close does, when the
// output takes it.
func TestCloseWithin(t *testing.T) {
	var out syncBuffer
	w := logbuf.New(&out, logbuf.Config{FlushInterval: time.Hour})
	w.Write([]byte("a\n"))
	if !w.CloseWithin(10 * time.Second) {
		t.Fatal("CloseWithin gave up on an output that takes lines")
	}
	if got := out.String(); got != "a\n" {
		t.Fatalf("after CloseWithin: %q, want %q", got, "a\n")
	}
}

// CloseWithin gives up on an output that does not take the lines (a
// process must be able to exit with its stderr blocked), and from then on
// no Write waits for that output, not even a line too long for the
// buffer.
func TestCloseWithinBlockedOutput(t *testing.T) {
	out := &blockingWriter{release: make(chan struct{})}
	defer close(out.release)
	w := logbuf.New(out, logbuf.Config{FlushInterval: time.Millisecond, Size: 16})
	w.Write([]byte("first\n"))
	testkit.WaitFor(t, "the output blocked on the first line", func() bool { return out.Blocked() })
	w.Write([]byte("second\n"))
	done := make(chan bool, 1)
	go func() { done <- w.CloseWithin(50 * time.Millisecond) }()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("CloseWithin reports a blocked output took the lines")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("CloseWithin waited for a blocked output past its bound")
	}
	before := w.Dropped()
	wrote := make(chan struct{})
	go func() {
		w.Write([]byte("third\n"))
		w.Write([]byte(strings.Repeat("x", 100) + "\n"))
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("Write after a CloseWithin that gave up waited for the output")
	}
	if got := w.Dropped() - before; got != 2 {
		t.Errorf("%d lines dropped after CloseWithin gave up, want 2", got)
	}
}

// A line longer than the buffer goes out whole, after the lines before it.
func TestLongLine(t *testing.T) {
	var out syncBuffer
	w := logbuf.New(&out, logbuf.Config{FlushInterval: time.Hour, Size: 16})
	defer w.Close()
	w.Write([]byte("short\n"))
	long := strings.Repeat("y", 100) + "\n"
	w.Write([]byte(long))
	if got := out.String(); got != "short\n"+long {
		t.Fatalf("got %q", got)
	}
}

// Through a slog handler from many goroutines, every line comes out whole.
func TestSlogConcurrent(t *testing.T) {
	var out syncBuffer
	w := logbuf.New(&out, logbuf.Config{FlushInterval: time.Millisecond, Size: 4096})
	log := slog.New(slog.NewTextHandler(w, nil))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				log.Info("connection ended", "g", g, "i", i)
			}
		})
	}
	wg.Wait()
	w.Close()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if int64(len(lines))+w.Dropped() != 1600 {
		t.Errorf("%d lines + %d dropped, want 1600", len(lines), w.Dropped())
	}
	for _, l := range lines {
		if !strings.Contains(l, `msg="connection ended"`) || !strings.HasPrefix(l, "time=") {
			t.Fatalf("torn line %q", l)
		}
	}
}

// A Write costs no allocation.
func TestWriteAllocs(t *testing.T) {
	w := logbuf.New(discard{}, logbuf.Config{})
	defer w.Close()
	line := []byte("time=2026-12-01T23:00:00.000Z level=INFO msg=\"connection ended\"\n")
	w.Write(line)
	if n := testing.AllocsPerRun(1000, func() { w.Write(line) }); n != 0 {
		t.Errorf("Write: %v allocations, want 0", n)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func BenchmarkWrite(b *testing.B) {
	w := logbuf.New(discard{}, logbuf.Config{})
	defer w.Close()
	line := []byte(strings.Repeat("z", 200) + "\n")
	b.ReportAllocs()
	for b.Loop() {
		w.Write(line)
	}
}

// With Wait, a line whose Write returned is in the output, however long
// the flush interval.
func TestWaitWritesBeforeReturning(t *testing.T) {
	var out syncBuffer
	w := logbuf.New(&out, logbuf.Config{FlushInterval: time.Hour, Wait: time.Minute})
	defer w.Close()
	var want strings.Builder
	for i := range 100 {
		line := fmt.Sprintf("line %03d\n", i)
		w.Write([]byte(line))
		want.WriteString(line)
		if got := out.String(); got != want.String() {
			t.Fatalf("after Write of line %d the output holds %q", i, got)
		}
	}
}

// With Wait, an output that does not take a line costs one Wait: the
// Writes after it return at once, buffered or dropped, until the output
// takes a write again; then Write waits for its line again.
func TestWaitStalledOutput(t *testing.T) {
	out := &blockingWriter{release: make(chan struct{})}
	w := logbuf.New(out, logbuf.Config{FlushInterval: time.Hour, Size: 1000, Wait: 100 * time.Millisecond})
	defer w.Close()
	w.Write([]byte("first\n")) // waits 100 ms: the output is blocked
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 { // 100 s if each waited
			fmt.Fprintf(w, "line %05d\n", i)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Write waited for a stalled output line after line")
	}
	if w.Dropped() == 0 {
		t.Error("no line dropped while the output was stalled")
	}
	close(out.release)
	testkit.WaitFor(t, "the output to take the lines held", func() bool { return strings.Contains(out.String(), "first\n") })
	w.Write([]byte("after\n")) // the output takes writes again: Write waits for its line
	if got := out.String(); !strings.HasSuffix(got, "after\n") {
		t.Errorf("after the output recovered, a returned Write's line is not out: %q", got[max(0, len(got)-100):])
	}
}
