package api

import (
	"context"
	"net/http"
	"sync"

	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
)

// readier is a store that can tell whether this replica can serve now
// (the PostgreSQL store: its database answers, at the schema version it
// knows). A store without it is ready while the process serves.
type readier interface {
	Ready(ctx context.Context) error
}

// readiness answers GET /readyz, a load balancer's or an orchestrator's
// readiness probe, without a token: 200 {"ready": true}, or 503
// {"ready": false, "reason": "unavailable"} with Retry-After while the
// store cannot serve. Why not (which database, what failed) is answered
// to the admin's token alone, since it names the database, and logged
// when it changes, so the log holds each fault once, not once a probe.
// GET /healthz stays 200 while the process is alive.
type readiness struct {
	f    *fleet.Fleet
	keys *keys

	mu   sync.Mutex
	last string // the last answer's error; "" while ready
}

func (h *readiness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var err error
	if s, ok := h.f.Store.(readier); ok {
		err = s.Ready(r.Context())
	}
	if r.Context().Err() == nil { // not a probe that gave up
		h.logChange(err)
	}
	if err == nil {
		writeJSON(w, http.StatusOK, map[string]bool{"ready": true})
		return
	}
	body := map[string]any{"ready": false, "reason": ReasonUnavailable}
	if id, ok := h.keys.lookup(r.Header.Get("Authorization")); ok && id.admin() {
		body["error"] = err.Error()
	}
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, body)
}

// logChange logs err when it is not what the last probe found.
func (h *readiness) logChange(err error) {
	now := ""
	if err != nil {
		now = err.Error()
	}
	h.mu.Lock()
	was := h.last
	h.last = now
	h.mu.Unlock()
	switch {
	case now == was:
	case err == nil:
		h.f.Log.Info("ready again", "was", was)
	default:
		h.f.Log.Warn("not ready", "err", err)
	}
}
