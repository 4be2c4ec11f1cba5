package api_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/filestore"
	"github.com/proofkit/nodekit/examples/platform/internal/pgstore"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/testing/pgtest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// The log tells a reading's story in order: the overload it started,
// then the routes its plan closed, on every store and every path a
// report takes through PostgreSQL (alone, and in batches).
func TestOverloadLoggedBeforeItsClosures(t *testing.T) {
	check := func(t *testing.T, open func(c *platformtest.Clock, log *slog.Logger) store.Store) {
		c := &platformtest.Clock{T: platformtest.T0}
		var logs testkit.LogBuffer
		tp := apitest.Serve(t, c, open(c, slog.New(slog.NewTextHandler(&logs, nil))))
		for range 3 {
			if code := tp.Read("x1", 95); code != 200 {
				t.Fatalf("reading: status %d", code)
			}
			c.Add(30 * time.Second)
		}
		out := logs.String()
		started := strings.Index(out, `msg="overload started" node=x1`)
		closing := strings.Index(out, `msg="closing route" node=x1 route=r-idle5`)
		if started < 0 || closing < 0 || closing < started {
			t.Errorf("overload started at %d, its route closed at %d in the log; want both, the start first:\n%s", started, closing, out)
		}
	}
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		check(t, func(c *platformtest.Clock, log *slog.Logger) store.Store {
			p, err := filestore.Open(store.Config{StateDir: dir, Now: c.Now, Logger: log}, platformtest.Seed())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			return p
		})
	})
	for _, batch := range []int{1, 8} {
		t.Run(fmt.Sprintf("postgres/batch=%d", batch), func(t *testing.T) {
			url := pgtest.Need(t, cluster).NewDatabase(t)
			check(t, func(c *platformtest.Clock, log *slog.Logger) store.Store {
				p, err := pgstore.Open(t.Context(), url, store.Config{Now: c.Now, Logger: log}, pgstore.Options{PlanEvery: 30 * time.Second, Batch: batch, Cache: 1000}, platformtest.Seed())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				return p
			})
		})
	}
}
