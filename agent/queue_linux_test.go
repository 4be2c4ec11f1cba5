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
