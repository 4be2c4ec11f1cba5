package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// TestIntegrationQueueDiskFull fills a real tmpfs: an append that does
// not fit is cut back, so no half line is left for the next report to be
// glued to, the report stays queued in memory, and once there is room
// again every report is on disk, in order, and reads back.
func TestIntegrationQueueDiskFull(t *testing.T) {
	testkit.NeedRoot(t, "mount", "umount")
	dir := t.TempDir()
	if err := testkit.MountTmpfs(t, dir, "64k"); err != nil {
		t.Skipf("skipping: %v", err)
	}
	path := filepath.Join(dir, queueFile)
	q, _, err := openQueue(path, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// Reports of about 1.5 KiB; the filler leaves room for a few.
	report := func(i int) []byte {
		return fmt.Appendf(nil, `{"n":%d,"pad":%q}`, i, strings.Repeat("x", 1500))
	}
	filler := filepath.Join(dir, "filler")
	if err := testkit.FillDisk(filler); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, mustSize(t, filler)-6*1024); err != nil {
		t.Fatal(err)
	}
	var failed, pushed int
	for i := 0; failed < 3 && i < 100; i++ {
		_, err := q.push(report(i))
		pushed++
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("push %d: %v, want ENOSPC", i, err)
			}
			failed++
			// What is on disk is whole lines only.
			b, _ := os.ReadFile(path)
			if _, bad := parseQueue(t, b); len(bad) > 0 || (len(b) > 0 && b[len(b)-1] != '\n') {
				t.Fatalf("after a failed append the file ends in a part line (%d bytes, bad %v)", len(b), bad)
			}
		}
	}
	if failed == 0 {
		t.Fatal("the tmpfs never filled")
	}
	if q.len() != pushed {
		t.Errorf("%d reports queued, want all %d pushed (the failed ones in memory)", q.len(), pushed)
	}
	// Room again: the next push writes the whole queue.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := q.push(report(pushed)); err != nil {
		t.Fatal(err)
	}
	q2, ld, err := openQueue(path, 1000)
	if err != nil || ld.badLines > 0 {
		t.Fatalf("reopen: bad %v err %v", ld.bad, err)
	}
	for i := 0; i <= pushed; i++ {
		it, ok := q2.head()
		if !ok || !bytes.Equal(it.body, report(i)) {
			t.Fatalf("report %d missing or out of order after the disk had room again", i)
		}
		q2.items = q2.items[1:]
	}
}

func mustSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestQueueDrainWritesLinearly: a queue of n reports drained one by one
// (the platform back after an outage) wrote the whole file again at every
// removal, n²/2 reports in all: 5,000 queued reports of 1 KiB wrote
// 12 GB to the disk. Now a removal blanks the sent report's line in
// place, and the file is written again only once it would hold more
// lines than the bound; a crash in between sends none of the removed
// reports again (the next process may have another run, and a platform
// that has seen that run since would count them twice), and opening
// drops none of the queued ones to make room for their lines.
func TestQueueDrainWritesLinearly(t *testing.T) {
	path := filepath.Join(t.TempDir(), queueFile)
	const n = 200
	q, _, err := openQueue(path, n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := q.push(fmt.Appendf(nil, `{"run":"r","seq":%d}`, i+1)); err != nil {
			t.Fatal(err)
		}
	}
	ino := func() uint64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before, rewrites := ino(), 0
	for range n - 10 {
		it, _ := q.begin()
		q.end(it.id, true)
		if err := q.remove(it.id); err != nil {
			t.Fatal(err)
		}
		if now := ino(); now != before {
			rewrites, before = rewrites+1, now
		}
	}
	if rewrites > 0 {
		t.Errorf("draining %d of %d reports rewrote the file %d times, want none", n-10, n, rewrites)
	}
	// A crash now, on a copy of the file: opening finds the 10 reports
	// still queued, and none of those removed.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(t.TempDir(), queueFile)
	if err := os.WriteFile(crashed, b, 0o600); err != nil {
		t.Fatal(err)
	}
	q1, _, err := openQueue(crashed, n)
	if err != nil {
		t.Fatal(err)
	}
	if q1.len() != 10 || q1.items[0].seq != n-9 {
		t.Errorf("reopened after the drain: %d queued from seq %d, want the 10 from seq %d", q1.len(), q1.items[0].seq, n-9)
	}
	// Pushes while draining: the file is rewritten once it would hold
	// more lines than the bound, never for each push.
	for i := range n - 10 {
		if _, err := q.push(fmt.Appendf(nil, `{"run":"r","seq":%d}`, n+i+1)); err != nil {
			t.Fatal(err)
		}
		if now := ino(); now != before {
			rewrites, before = rewrites+1, now
		}
	}
	if rewrites != 1 {
		t.Errorf("%d pushes after draining rewrote the file %d times, want once", n-10, rewrites)
	}
	// A crash now (no close): opening keeps every queued report.
	q2, ld, err := openQueue(path, n)
	if err != nil {
		t.Fatal(err)
	}
	if ld.dropped.n != 0 || q2.len() != q.len() {
		t.Errorf("reopened: %d queued, %d dropped; want the %d queued, none dropped", q2.len(), ld.dropped.n, q.len())
	}
	last := q2.items[len(q2.items)-1]
	if last.seq != 2*n-10 {
		t.Errorf("reopened: last seq %d, want %d", last.seq, 2*n-10)
	}
}

// TestQueueCompact: compact leaves the file holding exactly what is
// queued, so a clean stop sends nothing twice; reports that were kept in
// memory only (a full disk) are written out then, if there is room.
func TestQueueCompact(t *testing.T) {
	path := filepath.Join(t.TempDir(), queueFile)
	q, _, err := openQueue(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := q.push(fmt.Appendf(nil, `{"run":"r","seq":%d}`, i+1)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		it, _ := q.begin()
		q.end(it.id, true)
		if err := q.remove(it.id); err != nil {
			t.Fatal(err)
		}
	}
	q.dirty = true // as after a failed append
	if err := q.compact(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"run\":\"r\",\"seq\":3}\n{\"run\":\"r\",\"seq\":4}\n{\"run\":\"r\",\"seq\":5}\n"; string(b) != want {
		t.Errorf("after compact the file holds\n%s\nwant\n%s", b, want)
	}
}
