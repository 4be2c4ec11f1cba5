package pinproxy

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// The line logged when a connection ends is formatted by a goroutine of
// the proxy's own, not by the connection's: that goroutine runs on the
// smallest stack the runtime gives (it idles with the connection), and a
// slog handler's call chain grew it twice for every line (runtime.newstack,
// copystack), which cost more than the formatting itself. finish queues a
// small record; lineLoop formats the queued ones in batches.

// endLine is a connection's end as its line tells it.
type endLine struct {
	c      *conn
	r      spliceResult
	reason endReason
	level  slog.Level
	at     time.Time
}

// lineQueue holds the lines of connections that ended, for lineLoop.
type lineQueue struct {
	mu       sync.Mutex
	running  bool      // lineLoop takes lines; else finish logs them itself
	lines    []endLine // waiting
	spare    []endLine
	kick     chan struct{} // cap 1: lines are waiting
	stop     chan struct{} // closed to end lineLoop, once the handlers are done
	done     chan struct{} // closed when lineLoop has ended
	stopOnce sync.Once
}

// maxQueuedLines bounds the queue: past it finish logs its line itself
// (and the log's writer drops what it cannot take).
const maxQueuedLines = 1 << 14

// lineBatch is how long lineLoop lets lines gather once one is waiting,
// so that a busy proxy wakes it once per batch, not once per line.
const lineBatch = time.Millisecond

// startLines starts lineLoop; Serve calls it once, under p.mu.
func (p *Proxy) startLines() {
	q := &p.lineQ
	q.kick = make(chan struct{}, 1)
	q.stop = make(chan struct{})
	q.done = make(chan struct{})
	q.mu.Lock()
	q.running = true
	q.mu.Unlock()
	go p.lineLoop()
}

// stopLines logs the lines still queued and ends lineLoop. Shutdown calls
// it once every handler has returned, so no line comes after.
func (p *Proxy) stopLines() {
	q := &p.lineQ
	if q.stop == nil {
		return
	}
	q.stopOnce.Do(func() {
		close(q.stop)
		<-q.done
	})
}

// queueLine queues e for lineLoop and reports whether it did.
func (p *Proxy) queueLine(e endLine) bool {
	q := &p.lineQ
	q.mu.Lock()
	if !q.running || len(q.lines) >= maxQueuedLines {
		q.mu.Unlock()
		return false
	}
	q.lines = append(q.lines, e)
	first := len(q.lines) == 1
	q.mu.Unlock()
	if first {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// lineLoop logs the queued lines, in order, until stopLines.
func (p *Proxy) lineLoop() {
	q := &p.lineQ
	defer close(q.done)
	t := time.NewTimer(lineBatch)
	t.Stop()
	var buf []byte // a line written by hand (lineOut), reused
	for {
		select {
		case <-q.kick:
			t.Reset(lineBatch) // let the batch gather
			select {
			case <-t.C:
			case <-q.stop:
				t.Stop()
			}
		case <-q.stop:
		}
		q.mu.Lock()
		batch := q.lines
		q.lines = q.spare[:0]
		stopping := false
		select {
		case <-q.stop:
			stopping = true
			q.running = false
		default:
		}
		q.mu.Unlock()
		for i := range batch {
			buf = p.writeEnd(buf, &batch[i])
			batch[i] = endLine{} // let the conn go
		}
		q.mu.Lock()
		q.spare = batch[:0]
		q.mu.Unlock()
		if stopping {
			return
		}
	}
}

// writeEnd logs e's line, written by hand into buf (returned for the next
// line) when the handler is NewLogHandler's and the line has no error,
// else through slog (logEnd).
func (p *Proxy) writeEnd(buf []byte, e *endLine) []byte {
	if p.lineOut == nil || e.r.err != nil && !errors.Is(e.r.err, net.ErrClosed) {
		p.logEnd(*e)
		return buf
	}
	buf = appendEndLine(buf[:0], e)
	p.lineOut.Write(buf)
	return buf
}

// logEnd logs a connection's line through slog: when the handler is not
// NewLogHandler's, or the line has an error. writeEnd writes the others
// itself (appendEndLine), without allocating. Six attributes: one more than a
// slog.Record holds without allocating. The client's address is formatted
// on the stack, so the line allocates that string and the Record's
// overflow only. It goes straight to the handler: Logger.LogAttrs would
// also take the caller's program counter (runtime.Callers), a tenth of
// the line's cost, for a source attribute nobody asked for.
//
//go:noinline
func (p *Proxy) logEnd(e endLine) {
	var addrBuf [64]byte
	attrs := [...]slog.Attr{
		slog.String("client", string(appendAddr(addrBuf[:0], e.c.client.RemoteAddr()))), slog.String("upstream", e.c.up.addr),
		slog.Duration("duration", roundForLog(e.at.Sub(e.c.start))),
		slog.Int64("bytes_sent", e.r.up), slog.Int64("bytes_received", e.r.down),
		slog.String("reason", e.reason.String()),
		{},
	}
	n := len(attrs) - 1
	if err := e.r.err; err != nil && !errors.Is(err, net.ErrClosed) {
		attrs[n] = slog.Any("err", err)
		n++
	}
	rec := slog.NewRecord(e.at, e.level, "connection ended", 0)
	rec.AddAttrs(attrs[:n]...)
	p.log.Handler().Handle(p.stopCtx, rec)
}
