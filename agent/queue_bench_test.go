package agent

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkQueueDrain drains a full queue of 2,880 reports of about
// 1 KiB (a day at the default interval) one by one, as the agent does
// when the platform answers again after an outage: each removal blanks
// the sent report's line in place and fsyncs. The file lives in the
// test's temporary directory, so TMPDIR picks the disk measured.
//
//	go test -run '^$' -bench QueueDrain -benchtime 3x ./agent/
func BenchmarkQueueDrain(b *testing.B) {
	const n = 2880
	pad := bytes.Repeat([]byte{'a'}, 900)
	for b.Loop() {
		b.StopTimer()
		q, _, err := openQueue(filepath.Join(b.TempDir(), queueFile), n)
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			if _, err := q.push(fmt.Appendf(nil, `{"run":"r","seq":%d,"pad":"%s"}`, i+1, pad)); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		for range n {
			it, _ := q.begin()
			q.end(it.id, true)
			if err := q.remove(it.id); err != nil {
				b.Fatal(err)
			}
		}
	}
}
