package pinproxy

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// NewLogHandler returns a slog.Handler that writes each record to w as one
// line of text, at level and above, exactly as slog.NewTextHandler(w,
// &slog.HandlerOptions{Level: level}) does. Given as Config.Logger's
// handler (slog.New(pinproxy.NewLogHandler(w, level))), it lets the proxy
// write a connection's line itself, the same bytes without a slog.Record
// and without allocating. w gets one Write per line, never two at once.
func NewLogHandler(w io.Writer, level slog.Leveler) slog.Handler {
	h := &logHandler{level: level}
	h.out.w = w
	h.Handler = slog.NewTextHandler(&h.out, &slog.HandlerOptions{Level: level})
	return h
}

// logHandler is NewLogHandler's handler: slog's text handler, and the
// writer the proxy's own lines go to. A handler derived from it (WithAttrs,
// WithGroup) is slog's, so the proxy then logs through slog.
type logHandler struct {
	slog.Handler
	level slog.Leveler
	out   lockedWriter
}

// lockedWriter serialises the lines of slog's handler and the proxy's own.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// Enabled is the text handler's, without the interface call.
func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool {
	min := slog.LevelInfo
	if h.level != nil {
		min = h.level.Level()
	}
	return l >= min
}

// appendEndLine appends e's line to b as the text handler writes it:
// time, level, msg, then client, upstream, duration, bytes_sent,
// bytes_received, reason. A line with an error is left to slog.
func appendEndLine(b []byte, e *endLine) []byte {
	b = append(b, "time="...)
	b = appendRFC3339Millis(b, e.at)
	b = append(b, " level="...)
	b = append(b, e.level.String()...)
	b = append(b, ` msg="connection ended" client=`...)
	n := len(b)
	b = appendAddr(b, e.c.client.RemoteAddr())
	b = quoteFrom(b, n)
	b = append(b, " upstream="...)
	b = appendTextString(b, e.c.up.addr)
	b = append(b, " duration="...)
	b = append(b, roundForLog(e.at.Sub(e.c.start)).String()...) // Duration.String is inlined: its string does not escape, no allocation
	b = append(b, " bytes_sent="...)
	b = strconv.AppendInt(b, e.r.up, 10)
	b = append(b, " bytes_received="...)
	b = strconv.AppendInt(b, e.r.down, 10)
	b = append(b, " reason="...)
	b = appendTextString(b, e.reason.String())
	return append(b, '\n')
}

// appendRFC3339Millis is slog's time format: RFC 3339, milliseconds.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	const prefixLen = len("2006-01-02T15:04:05.000")
	n := len(b)
	t = t.Truncate(time.Millisecond).Add(time.Millisecond / 10)
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b[:n+prefixLen], b[n+prefixLen+1:]...) // drop the 4th digit
}

// appendTextString appends s as slog's text handler writes a string value:
// quoted when it needs to be.
func appendTextString(b []byte, s string) []byte {
	if needsQuoting(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

// quoteFrom quotes b[n:] in place as appendTextString would, when it needs
// to be; it allocates only then.
func quoteFrom(b []byte, n int) []byte {
	if !needsQuoting(string(b[n:])) { // no copy: the conversion does not escape
		return b
	}
	s := string(b[n:])
	return strconv.AppendQuote(b[:n], s)
}

// needsQuoting is slog's rule for text values: empty, a space, '=', '"', a
// control character, or a rune that is not printable or is a space.
func needsQuoting(s string) bool {
	if len(s) == 0 {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == ' ' || c == '=' || c == '"' {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}
