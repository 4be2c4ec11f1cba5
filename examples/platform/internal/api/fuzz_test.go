package api_test

import (
	"bytes"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/filestore"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// FuzzReport: any body POSTed to /report gets 200, 400 or 409 (what the
// agent's retry rules know), never a 500 or a panic.
func FuzzReport(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"node":"x1","at":"2026-11-30T12:00:00Z","memory_used_percent":95,"cpus":4,"conntrack_max":1}`,
		`{"v":1,"node":"x1","at":"2026-11-30T11:00:00Z","memory_used_percent":95,"cpus":4,"conntrack_max":1}`,
		`{"v":1,"node":"new","at":"2026-11-30T12:00:00Z","cpus":1,"conntrack_max":1,"missing":["bandwidth"]}`,
		`{"v":2}`, `{`, `null`, `[]`, `{"v":1,"node":"x1","at":"9999-01-01T00:00:00Z","cpus":1,"conntrack_max":1}`,
	} {
		f.Add([]byte(s))
	}
	c := &platformtest.Clock{T: platformtest.T0.Add(time.Hour)}
	p, err := filestore.Open(store.Config{StateDir: f.TempDir(), Now: c.Now}, platformtest.Seed())
	if err != nil {
		f.Fatal(err)
	}
	h := api.Handler(fleet.New(p, nil), api.Tokens{platformtest.TestToken: ""})
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/report", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+platformtest.TestToken)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case 200, 400, 409:
		default:
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body)
		}
	})
}
