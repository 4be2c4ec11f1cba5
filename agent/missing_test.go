package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/proofkit/nodekit/overload"
)

// missingSource is a fakeSource whose readings miss the inputs set, with
// a note.
type missingSource struct {
	*fakeSource
	mu      sync.Mutex
	missing []overload.Input
	notes   []string
}

func (s *missingSource) set(notes []string, in ...overload.Input) {
	s.mu.Lock()
	s.missing, s.notes = in, notes
	s.mu.Unlock()
}

func (s *missingSource) Read(ctx context.Context) (overload.Reading, error) {
	r, err := s.fakeSource.Read(ctx)
	s.mu.Lock()
	r.Missing, r.Notes = s.missing, s.notes
	s.mu.Unlock()
	return r, err
}

// TestMissingInputIsLogged: an input that cannot be measured (meminfo
// turned to garbage) left its check not passed with nothing in the log
// above debug level. Now the agent warns once when an input goes missing
// (at the second reading for one missing from the start: the first has
// no deltas), with the reading's notes, and says when it is measured
// again; a reading that misses the same inputs says nothing more.
func TestMissingInputIsLogged(t *testing.T) {
	var log bytes.Buffer
	src := &missingSource{fakeSource: newFakeSource()}
	a, err := New(Config{Node: "n1", Source: src, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	step := func() string {
		t.Helper()
		log.Reset()
		if _, err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		return log.String()
	}
	const warn, back = "inputs could not be measured; their checks count as not passed", "inputs measured again"
	first := []string{"the first reading has no deltas"}
	src.set(first, overload.InputListenDrops, overload.InputBandwidth)
	if out := step(); strings.Contains(out, warn) {
		t.Errorf("first reading, deltas missing as always: %s", out)
	}
	speed := []string{"link eth0: speed unknown"}
	src.set(speed, overload.InputBandwidth)
	if out := step(); !strings.Contains(out, `level=WARN msg="`+warn+`" missing=[bandwidth] notes="[link eth0: speed unknown]"`) {
		t.Errorf("second reading, bandwidth missing from the start: %s", out)
	}
	if out := step(); strings.Contains(out, warn) {
		t.Errorf("the same inputs missing again: %s", out)
	}
	garbage := []string{"memory: meminfo: no MemTotal: malformed", "link eth0: speed unknown"}
	src.set(garbage, overload.InputMemory, overload.InputBandwidth)
	if out := step(); !strings.Contains(out, `level=WARN msg="`+warn+`" missing=[memory] notes="[memory: meminfo: no MemTotal: malformed link eth0: speed unknown]"`) {
		t.Errorf("memory gone missing: %s", out)
	}
	src.set(speed, overload.InputBandwidth)
	if out := step(); !strings.Contains(out, `level=INFO msg="`+back+`" inputs=[memory]`) {
		t.Errorf("memory back: %s", out)
	}
	src.set(nil)
	if out := step(); !strings.Contains(out, `level=INFO msg="`+back+`" inputs=[bandwidth]`) {
		t.Errorf("bandwidth back: %s", out)
	}
}

// linkSource is a fakeSource whose readings carry a link of this name.
type linkSource struct {
	*fakeSource
	name string
}

func (s linkSource) Read(ctx context.Context) (overload.Reading, error) {
	r, err := s.fakeSource.Read(ctx)
	r.Links[0].Name = s.name
	return r, err
}

// TestLinkNameNotUTF8: a link name that is not UTF-8 (which the kernel
// allows) as a metric label panicked in the Prometheus client, ending
// the agent at its first reading, and at every restart.
func TestLinkNameNotUTF8(t *testing.T) {
	a, err := New(Config{Node: "n1", Source: linkSource{newFakeSource(), "v\xff"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `proofkit_agent_network_receive_bytes_total{device="v\\xff"}`) {
		t.Errorf("no byte counter for the link, its name escaped:\n%s", rec.Body.String())
	}
}
