package agent

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// TestIntegrationFullDiskNumbersNoReadingTwice fills a real tmpfs under
// the state directory while the platform takes every report: the state
// cannot be saved, the reports go from memory. The agent then stops
// without a save (as a kill -9 leaves it), the disk gets room and the
// agent starts again from the state saved before the disk filled. The
// platform must never get two readings under one run and seq.
func TestIntegrationFullDiskNumbersNoReadingTwice(t *testing.T) {
	testkit.NeedRoot(t, "mount", "umount")
	dir := t.TempDir()
	if err := testkit.MountTmpfs(t, dir, "64k"); err != nil {
		t.Skipf("skipping: %v", err)
	}
	p := &platform{}
	srv := httptest.NewServer(p)
	defer srv.Close()
	src := newFakeSource()
	src.at = time.Now()
	cfg := Config{Node: "n1", Source: src, StateDir: dir, ReportURL: srv.URL, Token: "t", Logger: testLogger(t)}

	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.rep.run(ctx); close(done) }()
	step := func(a *Agent) {
		t.Helper()
		if _, err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		step(a)
	}
	testkit.WaitFor(t, "3 readings delivered", func() bool { return len(p.readings()) == 3 })
	// Fill the disk: a file as large as the tmpfs takes.
	if err := testkit.FillDisk(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		step(a)
	}
	if err := a.Ready(); err == nil {
		t.Fatal("the state was saved on a full disk")
	}
	testkit.WaitFor(t, "6 readings delivered", func() bool { return len(p.readings()) == 6 })
	cancel()
	<-done
	a.Close() // no Save: as a kill -9 leaves it

	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	a, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel = context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { a.rep.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for range 3 {
		step(a)
	}
	testkit.WaitFor(t, "9 readings delivered", func() bool { return len(p.readings()) == 9 })
	type runSeq struct {
		run string
		seq uint64
	}
	seen := make(map[runSeq]time.Time)
	for _, r := range p.readings() {
		k := runSeq{r.Run, r.Seq}
		if at, dup := seen[k]; dup {
			t.Errorf("run %s seq %d names two readings, at %v and at %v", r.Run, r.Seq, at, r.At)
		}
		seen[k] = r.At
	}
}
