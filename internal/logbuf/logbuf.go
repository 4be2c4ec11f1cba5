// Package logbuf is a log writer that never makes its caller wait: lines
// are appended to a buffer in memory and written out by a goroutine of its
// own, at least every flush interval and whenever the buffer fills, so a
// line costs no write(2) of its own. When the output cannot keep up (a
// slow journald behind stderr) and both buffers are full, lines are
// dropped and counted rather than blocking the writer's caller. A process
// that crashes loses at most the lines of the last interval.
//
// A *slog.Logger writes through it as through any io.Writer: its handlers
// write one record per Write call, so a dropped Write is a dropped line.
//
//	w := logbuf.New(os.Stderr, logbuf.Config{})
//	defer w.Close()
//	log := slog.New(slog.NewTextHandler(w, nil))
package logbuf

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the zero values of Config.
const (
	DefaultFlushInterval = 100 * time.Millisecond
	DefaultSize          = 64 << 10
)

// Config configures a Writer; zero values mean the defaults.
type Config struct {
	// FlushInterval is the longest a line waits in the buffer before it
	// is written out. Zero means DefaultFlushInterval (100 ms).
	FlushInterval time.Duration

	// Size is the size of each of the writer's two buffers: one takes
	// lines while the other is written out. Zero means DefaultSize
	// (64 KiB). A line longer than Size is written out at once, after
	// the lines before it, by the caller's goroutine.
	Size int

	// Wait, when positive, makes Write wait until its line is written
	// out, for at most Wait: a line whose Write has returned is then in
	// the output, as with an unbuffered writer, and a process killed
	// right after loses none of them (a log that names what was dropped
	// must not drop that line). An output that takes longer than Wait is
	// stalled: from then until it takes a write again, Write returns at
	// once, buffering or dropping as when Wait is zero, so a stderr that
	// does not drain costs one Wait, not one a line. Zero means Write
	// never waits, and a crash loses the lines of the last flush
	// interval.
	Wait time.Duration
}

// Writer is a buffered, non-blocking io.Writer. Its methods are safe for
// concurrent use. Create one with New and Close it when done.
type Writer struct {
	out      io.Writer
	interval time.Duration
	size     int
	wait     time.Duration

	mu      sync.Mutex
	buf     []byte // lines taking in; nil until the first
	back    []byte // lines handed over to be written out, when pending
	pending bool   // back holds lines to write out, or is being written
	closed  bool   // Close was called: Write writes through
	gone    bool   // CloseWithin gave up on the output: Write drops

	// With wait: bytes ever taken into buf, and of them written out (the
	// buffers go out in order, so a line is out once written reaches
	// what appended was after it); flushed is closed, and replaced, at
	// each write out; stalled is set when a Write's wait ran out, and
	// cleared by the next write out.
	appended, written int64
	flushed           chan struct{}
	stalled           bool

	outMu     sync.Mutex    // held while writing to out
	kick      chan struct{} // the buffer filled: write out now
	stop      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
	dropped   atomic.Int64
}

// New returns a Writer that writes to out, and starts its flushing
// goroutine; Close stops it.
func New(out io.Writer, cfg Config) *Writer {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.Size <= 0 {
		cfg.Size = DefaultSize
	}
	w := &Writer{
		out:      out,
		interval: cfg.FlushInterval,
		size:     cfg.Size,
		wait:     cfg.Wait,
		flushed:  make(chan struct{}),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	go w.loop()
	return w
}

// Write appends p, one log line, to the buffer and returns at once. When
// the buffer is full and the one before it is still being written out, p
// is dropped and counted (see Dropped); Write still reports success, as a
// logger has nothing better to do with the error. After Close, Write
// writes p through to the output; after a CloseWithin that gave up, it
// drops p.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.gone {
		w.mu.Unlock()
		w.dropped.Add(1)
		return len(p), nil
	}
	if w.closed {
		w.mu.Unlock()
		w.outMu.Lock()
		defer w.outMu.Unlock()
		return w.out.Write(p)
	}
	if len(p) > w.size {
		w.mu.Unlock()
		return w.writeLong(p)
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, w.size)
	}
	if len(w.buf)+len(p) > w.size {
		if w.pending {
			w.mu.Unlock()
			w.dropped.Add(1)
			return len(p), nil
		}
		w.handOverLocked()
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	w.buf = append(w.buf, p...)
	w.appended += int64(len(p))
	if w.wait <= 0 || w.stalled {
		w.mu.Unlock()
		return len(p), nil
	}
	ticket, flushed := w.appended, w.flushed
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	w.waitWritten(ticket, flushed)
	return len(p), nil
}

// waitWritten waits, for at most w.wait, until the bytes up to ticket
// are written out; flushed is w.flushed when they were taken. When the
// wait runs out the output is stalled.
func (w *Writer) waitWritten(ticket int64, flushed chan struct{}) {
	t := time.NewTimer(w.wait)
	defer t.Stop()
	for {
		select {
		case <-flushed:
		case <-t.C:
			w.mu.Lock()
			if w.written < ticket {
				w.stalled = true
			}
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		done := w.written >= ticket
		flushed = w.flushed
		w.mu.Unlock()
		if done {
			return
		}
	}
}

// handOverLocked moves the buffered lines to back, to be written out, and
// gives buf the other buffer. Call with mu held and pending false.
func (w *Writer) handOverLocked() {
	if w.back == nil {
		w.back = make([]byte, 0, w.size)
	}
	w.buf, w.back = w.back[:0], w.buf
	w.pending = true
}

// writeLong writes a line too long for the buffer, after the lines before
// it.
func (w *Writer) writeLong(p []byte) (int, error) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	w.flushLocked()
	return w.out.Write(p)
}

// Flush writes out every line buffered so far, and returns when they are
// written. Call it before the process hands its work over (an upgrade) or
// exits.
func (w *Writer) Flush() {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	w.flushLocked()
}

// FlushWithin is Flush bounded by d: it returns false if the output has
// not taken the lines within d (they go out when it does).
func (w *Writer) FlushWithin(d time.Duration) bool {
	return within(d, w.Flush)
}

// within runs f and reports whether it returned within d (else f
// finishes on its own).
func within(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		f()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// flushLocked writes out back, if pending, then buf. Call with outMu held.
func (w *Writer) flushLocked() {
	for range 2 {
		w.mu.Lock()
		if !w.pending {
			if len(w.buf) == 0 {
				w.mu.Unlock()
				return
			}
			w.handOverLocked()
		}
		b := w.back
		w.mu.Unlock()
		w.out.Write(b) // a log's output has nowhere to report its error
		w.mu.Lock()
		w.back = b[:0]
		w.pending = false
		w.written += int64(len(b))
		w.stalled = false
		close(w.flushed)
		w.flushed = make(chan struct{})
		w.mu.Unlock()
	}
}

// loop writes out the buffer every interval and when it fills.
func (w *Writer) loop() {
	defer close(w.stopped)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		case <-w.kick:
		}
		w.Flush()
	}
}

// Dropped returns how many lines were dropped because the output did not
// keep up.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Close writes out what is buffered and stops the flushing goroutine;
// later writes go straight to the output. It never fails; the error is
// for io.Closer.
func (w *Writer) Close() error {
	w.closeOnce.Do(func() {
		close(w.stop)
		<-w.stopped
		w.outMu.Lock()
		defer w.outMu.Unlock()
		w.mu.Lock()
		w.closed = true // from here Write waits for outMu, so lines stay in order
		w.mu.Unlock()
		w.flushLocked()
	})
	return nil
}

// CloseWithin is Close bounded by d, for a process about to exit: it
// returns once what is buffered is written out, or after d, whichever
// comes first. An output that does not take the lines by then (a pipe
// whose reader stopped reading) keeps them, and the write it is blocked
// in stays blocked; CloseWithin returns false, and from then on Write
// drops and counts every line instead of waiting for that output.
func (w *Writer) CloseWithin(d time.Duration) bool {
	if within(d, func() { w.Close() }) {
		return true
	}
	w.mu.Lock()
	w.gone = true
	w.mu.Unlock()
	return false
}
