package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/proofkit/nodekit/internal/procfile"
)

// maxTokenFile bounds a token file: a bearer token is tens of bytes, so a
// longer file is not one (and /dev/zero would be read for ever).
const maxTokenFile = 64 << 10

// readTokenFile reads a bearer token: the file's content without the
// white space around it. It reads it as the probe reads /proc files: a
// file that is not a regular file (a FIFO, which would block until a
// writer came; a device such as /dev/zero, which never ends) or is over
// 64 KiB is an error, at once. An empty file, one of more than one
// line, and a token that is not printable ASCII without spaces (see
// checkToken) are errors too. Errors name the file and the reason, never
// the content.
func readTokenFile(path string) (string, error) {
	b, _, err := procfile.Read(context.Background(), path, maxTokenFile)
	if errors.Is(err, procfile.ErrNotRegular) || errors.Is(err, procfile.ErrTooLarge) {
		return "", fmt.Errorf("token file: %w; want a regular file holding one line", err) // the path is in err
	}
	if err != nil {
		// The path is said once, here; errors.Is still sees the errno
		// (fs.ErrNotExist, fs.ErrPermission).
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s: empty", path)
	}
	if strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("token file %s: more than one line", path)
	}
	if err := checkToken(tok); err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	return tok, nil
}

// checkToken says what keeps tok from being a bearer token the platform
// can match: anything but printable ASCII without spaces (RFC 6750's
// token is a subset), or the scheme written before it. Such a token would
// go out in every report (or, with a control character, not at all), and
// every report would wait for ever. The error says where, never what.
func checkToken(tok string) error {
	const want = "want the token alone, in printable ASCII"
	if len(tok) > len("Bearer ") && strings.EqualFold(tok[:len("Bearer ")], "Bearer ") {
		return errors.New(`starts with "Bearer "; want the token alone (the agent adds the scheme)`)
	}
	for i := 0; i < len(tok); i++ {
		switch c := tok[i]; {
		case c == ' ' || c == '\t':
			return fmt.Errorf("white space at byte %d; %s", i+1, want)
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("a control character at byte %d; %s", i+1, want)
		case c >= 0x80:
			return fmt.Errorf("byte %d is not ASCII (another encoding than UTF-8, or a byte-order mark?); %s", i+1, want)
		}
	}
	return nil
}

// bearer holds the token the reports carry. Reports are sent from the
// reporter's goroutine while ReloadToken may run on another, so the token
// is only read and set under mu.
type bearer struct {
	file string        // the token file; empty for a fixed token
	gap  time.Duration // least time between re-reads on the platform's refusal

	// changed is signalled when ReloadToken sets a new token, so a report
	// waiting out a back-off goes again at once.
	changed chan struct{}

	mu        sync.Mutex
	token     string
	refusedAt time.Time // when a refusal last made the file be re-read
}

func newBearer(token, file string, gap time.Duration) (*bearer, error) {
	b := &bearer{token: token, file: file, gap: gap, changed: make(chan struct{}, 1)}
	if file != "" {
		if _, err := b.reload(); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// get returns the current token.
func (b *bearer) get() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.token
}

// reload reads the token file and, if it holds a token, makes it the
// current one. On error the current token stays.
func (b *bearer) reload() (changed bool, err error) {
	if b.file == "" {
		return false, errors.New("no token file: the agent was given a fixed token")
	}
	tok, err := readTokenFile(b.file)
	if err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	changed = tok != b.token
	b.token = tok
	return changed, nil
}

// refused is called once for each 401 or 403 the platform gives: with a
// token file, it re-reads the file unless a refusal already did less than
// gap ago. reread says whether it did.
func (b *bearer) refused(now time.Time) (reread, changed bool, err error) {
	if b.file == "" {
		return false, false, nil
	}
	b.mu.Lock()
	if !b.refusedAt.IsZero() && now.Sub(b.refusedAt) < b.gap {
		b.mu.Unlock()
		return false, false, nil
	}
	b.refusedAt = now
	b.mu.Unlock()
	changed, err = b.reload()
	return true, changed, err
}

// ReloadToken reads Config.TokenFile again and, if it holds a token,
// sends that one from the next report on; a report waiting out a back-off
// after a refusal goes again at once. changed says whether the token
// differs from the one the agent had (false when the file still holds the
// same one, e.g. a copy made before the token was rotated). If the file
// cannot be read, is empty or has more than one line, the agent keeps the
// token it has and the error names the file and the reason (never the
// token). ReloadToken does not log: its caller says what happened
// (proofkit-agent calls it on SIGHUP and logs "token reloaded" or the
// error). It is safe to call while Run runs. An agent given a fixed
// Config.Token has no file to read: ReloadToken returns an error and
// changes nothing.
func (a *Agent) ReloadToken() (changed bool, err error) {
	changed, err = a.tok.reload()
	if err != nil {
		return false, fmt.Errorf("reload token: %w", err)
	}
	if changed {
		select {
		case a.tok.changed <- struct{}{}:
		default:
		}
	}
	return changed, nil
}
