package agent

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/proofkit/nodekit/internal/cmdkit"
	"github.com/proofkit/nodekit/overload"
)

// Status is what /status serves: the node, whether it is overloaded and
// since when, the checks that hold, and the latest reading.
type Status struct {
	// Node names the agent's node.
	Node string `json:"node"`
	// Overloaded says whether the node is overloaded now.
	Overloaded bool `json:"overloaded"`
	// Since is when the current overload started; zero when there is none.
	Since time.Time `json:"since,omitzero"`
	// Findings are the checks that hold now, with their figures (an empty
	// list, never null, when none does).
	Findings []overload.Finding `json:"findings"`
	// LastNotice is when the node's latest notice went out; zero when none
	// has.
	LastNotice time.Time `json:"last_notice,omitzero"`
	// Reading is the latest reading evaluated; nil before the first.
	Reading *overload.Reading `json:"reading,omitempty"`
	// ReportsQueued counts the reports not yet accepted by the platform.
	ReportsQueued int `json:"reports_queued"`
}

// Status returns the node's current status.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Status{
		Node:          a.node,
		Overloaded:    a.tracker.Overloaded(),
		Since:         a.tracker.Since(),
		Findings:      a.tracker.Findings(),
		LastNotice:    a.tracker.LastNotice(),
		ReportsQueued: a.q.len(),
	}
	if s.Findings == nil {
		s.Findings = []overload.Finding{}
	}
	if a.last != nil {
		r := *a.last
		s.Reading = &r
	}
	return s
}

// Events returns the node's event list (overload starts and ends), oldest
// first.
func (a *Agent) Events() []overload.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tracker.Events()
}

// Handler serves the agent's page at / (HTML, no script, no external
// assets), /metrics (Prometheus text format), /status (JSON, see Status),
// /events (JSON list of overload.Event), /healthz (see Healthy) and
// /readyz (see Ready).
func (a *Agent) Handler() http.Handler {
	// Each path here is in HandlerPaths.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", a.servePage)
	mux.HandleFunc("GET /healthz", cmdkit.Probe(a.Healthy))
	mux.HandleFunc("GET /readyz", cmdkit.Probe(a.Ready))
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, a.Status())
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, _ *http.Request) {
		ev := a.Events()
		if ev == nil {
			ev = []overload.Event{}
		}
		writeJSON(w, ev)
	})
	return mux
}

// HandlerPaths lists the paths Handler serves, the page first.
func HandlerPaths() []string {
	return []string{"/", "/metrics", "/status", "/events", "/healthz", "/readyz"}
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}
