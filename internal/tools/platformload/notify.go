package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

// hookSecret signs the messages the platform sends the receiver below.
const hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// hook is the operator's receiver for -notify: it answers 204 at once and
// records, per webhook-id, the time from the platform's decision (the
// message's timestamp) to the answer.
type hook struct {
	srv  *http.Server
	URL  string
	mu   sync.Mutex
	lat  map[string]time.Duration // the first 2xx per id
	reqs int
}

func startHook() (*hook, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &hook{URL: "http://" + ln.Addr().String() + "/hook", lat: map[string]time.Duration{}}
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go h.srv.Serve(ln)
	return h, nil
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m struct {
		Timestamp time.Time `json:"timestamp"`
	}
	json.Unmarshal(body, &m)
	id := r.Header.Get("webhook-id")
	w.WriteHeader(http.StatusNoContent)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reqs++
	if _, ok := h.lat[id]; !ok && !m.Timestamp.IsZero() {
		h.lat[id] = time.Since(m.Timestamp)
	}
}

// writeFile writes the notify file that sends every node's notices here.
func (h *hook) writeFile(path string) error {
	return os.WriteFile(path, []byte("* "+h.URL+" "+hookSecret+"\n"), 0o600)
}

// summary is the deliveries so far: ids, requests, p50 and p99 latency.
func (h *hook) summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lats []time.Duration
	for _, d := range h.lat {
		lats = append(lats, d)
	}
	slices.Sort(lats)
	if len(lats) == 0 {
		return "notices delivered: none"
	}
	n := len(lats)
	return fmt.Sprintf("notices delivered: %d ids in %d requests; decision to 2xx p50 %s p99 %s max %s",
		n, h.reqs, ms(lats[n/2]), ms(lats[min(n-1, n*99/100)]), ms(lats[n-1]))
}

func (h *hook) close() { h.srv.Close() }
