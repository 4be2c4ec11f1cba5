package apitest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/notify"
)

// NotifyFile writes a notify file of lines and returns its path.
func NotifyFile(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// NotifyConfig is a fast schedule for the tests: the workers are
// pumped by the tests themselves (Notifier.PumpOnce), on the test's clock.
func NotifyConfig(file string) notify.Config {
	return notify.Config{File: file, GiveUp: time.Hour, Timeout: 5 * time.Second, Lease: 30 * time.Second,
		BackoffBase: 10 * time.Second, BackoffMax: 2 * time.Minute, Poll: 10 * time.Millisecond}
}

// NewDispatch is the dispatch of cfg's notify file.
func NewDispatch(t *testing.T, cfg notify.Config) *notify.Dispatch {
	t.Helper()
	var rs *notify.Receivers
	if cfg.File != "" {
		var err error
		if rs, err = notify.ReadReceivers(cfg.File); err != nil {
			t.Fatal(err)
		}
	}
	return notify.NewDispatch(cfg, rs)
}

// WriteFile writes s to path, or fails t.
func WriteFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
