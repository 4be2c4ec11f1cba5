package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// childQueueEnv names the queue file (and bound) the child of
// TestQueueOpenLargeFile opens.
const childQueueEnv = "NK_QUEUE_CHILD"

// openResult is what the child reports of its opening.
type openResult struct {
	Kept     []string `json:"kept"` // run/seq
	BadLines int64    `json:"bad_lines"`
	BadBytes int64    `json:"bad_bytes"`
	Dropped  int64    `json:"dropped"`
	Size     int64    `json:"size"` // of the file after the opening
}

// TestQueueOpenChild is the child of TestQueueOpenLargeFile: it opens the
// queue named in the environment and prints what it found.
func TestQueueOpenChild(t *testing.T) {
	v := os.Getenv(childQueueEnv)
	if v == "" {
		t.Skip("skipping: run by TestQueueOpenLargeFile")
	}
	i := strings.LastIndexByte(v, ',')
	path, bound := v[:i], v[i+1:]
	n, err := strconv.Atoi(bound)
	if err != nil {
		t.Fatal(err)
	}
	q, ld, err := openQueue(path, n)
	if err != nil {
		t.Fatal(err)
	}
	res := openResult{BadLines: ld.badLines, BadBytes: ld.badBytes, Dropped: ld.dropped.n}
	for _, it := range q.items {
		res.Kept = append(res.Kept, fmt.Sprintf("%s/%d", it.run, it.seq))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	res.Size = fi.Size()
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
}

// TestQueueOpenLargeFile opens queue files of 2 GiB (sparse: one line of
// 2 GiB of NUL bytes between real reports) and of 96 MiB of real reports
// (3.8 million) in a child process, and checks the child's peak RSS:
// reading is a stream with the bound applied as it goes, so memory does
// not grow with the file, nor with the reports dropped. The newest
// reports the bound allows are kept (with the head, which the process
// before may have sent), everything else is counted, and the file is
// rewritten with what was kept, so the next start reads a small file.
func TestQueueOpenLargeFile(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: reads 2.1 GiB")
	}
	if testkit.BuiltWithRace(t) {
		t.Skip("skipping: reading 3.8 million reports under the race detector takes minutes")
	}
	const maxRSS = 64 << 20 // the test binary alone: about 15 MiB
	report := func(w *bufio.Writer, seq int) {
		fmt.Fprintf(w, `{"v":2,"node":"n1","run":"r1","seq":%d,"at":"2026-12-03T09:00:00Z","memory_used_percent":41.5}`+"\n", seq)
	}
	tests := []struct {
		name     string
		write    func(t *testing.T, f *os.File) (reports int)
		bound    int
		kept     []string
		badLines int64
		dropped  int64
	}{
		{
			name: "one line of 2 GiB",
			write: func(t *testing.T, f *os.File) int {
				w := bufio.NewWriter(f)
				for seq := 1; seq <= 3; seq++ {
					report(w, seq)
				}
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
				end, _ := f.Seek(0, 1)
				if _, err := f.Seek(end+2<<30, 0); err != nil { // a hole: 2 GiB of NUL bytes, no newline
					t.Fatal(err)
				}
				w = bufio.NewWriter(f)
				w.WriteString("\n")
				for seq := 4; seq <= 6; seq++ {
					report(w, seq)
				}
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
				return 6
			},
			bound:    4,
			kept:     []string{"r1/1", "r1/4", "r1/5", "r1/6"},
			badLines: 1,
			dropped:  2,
		},
		{
			name: "3.8 million reports",
			write: func(t *testing.T, f *os.File) int {
				w := bufio.NewWriterSize(f, 1<<20)
				seq := 1
				for size := 0; size < 96<<20; seq++ {
					n, _ := fmt.Fprintf(w, `{"run":"r1","seq":%d}`+"\n", seq)
					size += n
				}
				report(w, seq)
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
				return seq
			},
			bound: 120,
			// kept: the head and the newest 119; dropped: the rest
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), queueFile)
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			reports := tt.write(t, f)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestQueueOpenChild$", "-test.v")
			cmd.Env = append(os.Environ(), childQueueEnv+"="+path+","+strconv.Itoa(tt.bound))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			var res openResult
			for line := range strings.Lines(string(out)) {
				if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
					if err := json.Unmarshal([]byte(rest), &res); err != nil {
						t.Fatal(err)
					}
				}
			}
			rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10 // KiB on Linux
			t.Logf("peak RSS %.1f MiB; kept %d, skipped %d lines (%d bytes), dropped %d; file now %d bytes",
				float64(rss)/(1<<20), len(res.Kept), res.BadLines, res.BadBytes, res.Dropped, res.Size)
			if rss > maxRSS {
				t.Errorf("peak RSS %d MiB, want at most %d", rss>>20, maxRSS>>20)
			}
			if tt.kept == nil { // the head and the newest
				tt.kept = []string{"r1/1"}
				for seq := reports - tt.bound + 2; seq <= reports; seq++ {
					tt.kept = append(tt.kept, fmt.Sprintf("r1/%d", seq))
				}
				tt.dropped = int64(reports - tt.bound)
			}
			if fmt.Sprint(res.Kept) != fmt.Sprint(tt.kept) {
				t.Errorf("kept %v, want %v", res.Kept, tt.kept)
			}
			if len(res.Kept) != tt.bound {
				t.Errorf("kept %d reports, want the bound, %d", len(res.Kept), tt.bound)
			}
			if res.BadLines != tt.badLines {
				t.Errorf("skipped %d lines, want %d", res.BadLines, tt.badLines)
			}
			if res.Dropped != tt.dropped {
				t.Errorf("dropped %d, want %d", res.Dropped, tt.dropped)
			}
			if res.Size > 64<<10 {
				t.Errorf("the file holds %d bytes after the opening: not rewritten with what was kept", res.Size)
			}
		})
	}
}
