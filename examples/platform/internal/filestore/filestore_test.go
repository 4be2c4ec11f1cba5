package filestore_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/filestore"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/notify"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/examples/platform/internal/storetest"
	"github.com/proofkit/nodekit/overload"
)

// TestContract: the file store passes the stores' contract.
func TestContract(t *testing.T) {
	storetest.Run(t, storetest.Store{Open: func(t *testing.T) storetest.Opener {
		dir := t.TempDir()
		return func(c *platformtest.Clock, seed *store.SeedFile) store.Store {
			st, err := filestore.Open(store.Config{StateDir: dir, Now: c.Now, Logger: platformtest.Logger(t)}, seed)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
	}})
}

// TestStateFiles: one file per node, valid JSON, and a broken file stops
// the start rather than losing the node silently.
func TestStateFiles(t *testing.T) {
	dir := t.TempDir()
	c := &platformtest.Clock{T: platformtest.T0}
	tp := apitest.NewPlatform(t, dir, c, platformtest.Seed())
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	var base []string
	for _, n := range names {
		base = append(base, filepath.Base(n))
	}
	if want := []string{"f1.json", "x1.json", "x2.json"}; !slices.Equal(base, want) {
		t.Fatalf("state files %v, want %v", base, want)
	}
	// A plan round on a quiet fleet writes nothing.
	before, _ := os.ReadFile(filepath.Join(dir, "x1.json"))
	c.Add(time.Minute)
	fleet.New(tp.P, nil).PlanRound(t.Context())
	if after, _ := os.ReadFile(filepath.Join(dir, "x1.json")); !bytes.Equal(before, after) {
		t.Fatalf("a quiet plan round rewrote x1.json")
	}
	if err := os.WriteFile(filepath.Join(dir, "x1.json"), []byte(`{"v":1,`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := filestore.Open(store.Config{StateDir: dir, Now: c.Now}, nil); err == nil || !strings.Contains(err.Error(), "x1.json") {
		t.Fatalf("broken state file: err %v, want one naming x1.json", err)
	}
}

// TestStateNotRegular: a FIFO or a device in the state directory, where
// a node's file, the outbox log or the operators' receivers are read, is
// refused at once with an error naming it: opening a FIFO blocks until
// a writer comes, deaf to SIGTERM, and /dev/zero never ends.
func TestStateNotRegular(t *testing.T) {
	for _, name := range []string{"x9.json", "outbox.log", "operators.state"} {
		for _, kind := range []string{"fifo", "/dev/zero"} {
			dir := t.TempDir()
			path := filepath.Join(dir, name)
			var err error
			if kind == "fifo" {
				err = syscall.Mkfifo(path, 0o600)
			} else {
				err = os.Symlink(kind, path)
			}
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				cfg := store.Config{StateDir: dir, Now: (&platformtest.Clock{T: platformtest.T0}).Now, Dispatch: notify.NewDispatch(notify.Config{}, nil)}
				_, err := filestore.Open(cfg, nil)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "not a regular file") {
					t.Errorf("%s as %s: %v, want an error naming it, not a regular file", kind, name, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s as %s: Open still waits after 10 s", kind, name)
			}
		}
	}
}

func TestSeedErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*store.SeedFile)
		want string
	}{
		{"route of an unlisted node", func(s *store.SeedFile) { s.Routes[0].Node = "zz" }, `routes of node "zz"`},
		{"country mismatch", func(s *store.SeedFile) { s.Routes[0].Country = "FR" }, "country"},
		{"no role", func(s *store.SeedFile) { s.Nodes[0].Role = 0 }, "role"},
		{"duplicate route", func(s *store.SeedFile) { s.Routes[1].ID = s.Routes[0].ID }, "twice"},
		{"bad node name", func(s *store.SeedFile) { s.Nodes[0].ID = "a/b" }, "node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := platformtest.Seed()
			tc.edit(s)
			_, err := filestore.Open(store.Config{StateDir: t.TempDir(), Now: (&platformtest.Clock{T: platformtest.T0}).Now}, s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestNoticeIDsFromOldFiles: notices of a state directory written before
// notices had ids are numbered at start, by time and then node, and new
// ones go on after them.
func TestNoticeIDsFromOldFiles(t *testing.T) {
	dir := t.TempDir()
	c := &platformtest.Clock{T: platformtest.T0}
	tp := apitest.NewPlatform(t, dir, c, platformtest.Seed())
	for range 3 {
		for _, id := range []string{"x2", "x1"} { // x2's notice first, x1's at the same instant
			tp.Read(id, 95)
		}
		c.Add(30 * time.Second)
	}
	tp.Srv.Close()
	for _, id := range []string{"x1", "x2"} {
		path := filepath.Join(dir, id+".json")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var f map[string]any
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		delete(f, "notice_ids")
		if b, err = json.Marshal(f); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tp = apitest.NewPlatform(t, dir, c, nil)
	for range 3 {
		tp.Read("f1", 95)
		c.Add(30 * time.Second)
	}
	var ns []store.NumberedNotice
	tp.Do("GET", "/notices", nil, &ns)
	var got []string
	for _, n := range ns {
		got = append(got, fmt.Sprintf("%d %s", n.ID, n.Node))
	}
	if want := []string{"1 x1", "2 x2", "3 f1"}; !slices.Equal(got, want) {
		t.Fatalf("notices %q, want %q", got, want)
	}
}

// BenchmarkReport measures one reading through the handler: decode,
// observe, a plan round over the test seed's three nodes, and the atomic
// write of the changed node files (fsync included, in the temp dir).
func BenchmarkReport(b *testing.B) {
	c := &platformtest.Clock{T: platformtest.T0}
	p, err := filestore.Open(store.Config{StateDir: b.TempDir(), Now: c.Now}, platformtest.Seed())
	if err != nil {
		b.Fatal(err)
	}
	h := api.Handler(fleet.New(p, nil), api.Tokens{platformtest.TestToken: ""})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Add(30 * time.Second)
		body, _ := json.Marshal(overload.Reading{Node: "x1", At: c.Now(), MemoryUsedPercent: float64(50 + 45*(i/5%2)),
			CPUs: 4, ConntrackMax: 262144})
		req := httptest.NewRequest("POST", "/report", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+platformtest.TestToken)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// TestFullDisk: on a state directory whose file system is full, readings
// are refused (500 unsaved, which the agent retries), never answered
// 200 unstored; once space is freed they are taken again, and the
// directory still loads. tmpfs allocates by the page, so an append to
// the outbox log stops part way through a line when the disk fills: that
// part must not stay in the log for the next line to run into.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	c := &platformtest.Clock{T: platformtest.T0}
	cfg := apitest.NotifyConfig(apitest.NotifyFile(t, "* http://127.0.0.1:1/hook "+platformtest.HookSecret))
	open := func() *apitest.Platform {
		t.Helper()
		p, err := filestore.Open(store.Config{StateDir: dir, Now: c.Now, Logger: platformtest.Logger(t),
			Dispatch: apitest.NewDispatch(t, cfg)}, platformtest.Seed())
		if err != nil {
			t.Fatal(err)
		}
		tp := apitest.Serve(t, c, p)
		tp.Dir, tp.P = dir, p
		return tp
	}
	tp := open()
	taken := 0
	overload := func() (int, int) { // an overload's start (a notice), then its end
		c.Add(2 * time.Hour)
		a := tp.Read("x1", 95)
		c.Add(time.Minute)
		return a, tp.Read("x1", 40)
	}
	for range 3 {
		if a, b := overload(); a != 200 || b != 200 {
			t.Fatalf("readings before the disk filled: %d %d", a, b)
		}
		taken += 2
	}
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 4096); ; {
		if _, err := filler.Write(buf); err != nil {
			break
		}
	}
	filler.Close()
	for i := range 20 {
		if a, b := overload(); a != 500 || b != 500 {
			t.Fatalf("reading %d on a full disk: %d %d, want 500 500", i, a, b)
		}
	}
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if a, b := overload(); a != 200 || b != 200 {
			t.Fatalf("readings once space was freed: %d %d", a, b)
		}
		taken += 2
	}
	tp.Srv.Close()
	if err := tp.P.Close(); err != nil {
		t.Fatal(err)
	}
	tp = open()
	if got := tp.Node("x1").Readings; got != int64(taken) {
		t.Fatalf("after a restart x1 counts %d readings, want the %d answered 200", got, taken)
	}
}
