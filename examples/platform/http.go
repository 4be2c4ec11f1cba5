package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/proofkit/nodekit/overload"
)

// maxBody bounds a request body; a reading is a few hundred bytes.
const maxBody = 1 << 20

// handler serves the platform's API. POSTs need "Authorization: Bearer
// <token>": a node's token may only report for its node, an operator's
// token (no node) may do anything. GETs are open (an example: put it
// behind your own auth).
func (p *platform) handler(toks tokens) http.Handler {
	mux := http.NewServeMux()
	idx := toks.index()
	auth := func(agentMay bool, h func(w http.ResponseWriter, r *http.Request, node string)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			node, ok := idx.lookup(r.Header.Get("Authorization"))
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="platform"`)
				writeError(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"))
				return
			}
			if node != "" && !agentMay {
				writeError(w, http.StatusForbidden, fmt.Errorf("the token of node %s may only report", node))
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
			h(w, r, node)
		}
	}
	mux.HandleFunc("POST /report", auth(true, p.handleReport))
	mux.HandleFunc("POST /routes", auth(false, serve(http.StatusCreated, p.open)))
	mux.HandleFunc("POST /traffic", auth(false, serve(http.StatusOK, p.traffic)))
	mux.HandleFunc("POST /price", auth(false, serve(http.StatusNoContent, func(req priceRequest) (struct{}, error) {
		return struct{}{}, p.setPrice(req)
	})))
	mux.HandleFunc("GET /admit", p.handleAdmit)
	mux.HandleFunc("GET /nodes", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, p.views()) })
	mux.HandleFunc("GET /nodes/{id}", func(w http.ResponseWriter, r *http.Request) {
		v, err := p.view(r.PathValue("id"))
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
	mux.HandleFunc("GET /notices", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, p.noticesAll()) })
	mux.HandleFunc("GET /plans", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, p.plans()) })
	return mux
}

// handleReport takes one overload.Reading. The node is the token's, or,
// for an operator's token, the one the reading names. The answers are
// chosen for the agent's retry rules: 200 for a reading counted now or
// already counted (a retry after a lost answer must not be retried for
// ever), 409 for one older than the latest (the agent drops it), 400 for
// one that cannot be true (dropped too), 401 for a bad token and 403 for a
// reading of another node than the token's (kept and retried: the
// operator must fix the agent's configuration).
func (p *platform) handleReport(w http.ResponseWriter, r *http.Request, tokenNode string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("reading body: %w", err))
		return
	}
	var rd overload.Reading
	if err := json.Unmarshal(body, &rd); err != nil { // validates, and checks "v"
		writeError(w, http.StatusBadRequest, fmt.Errorf("reading: %w", err))
		return
	}
	if tokenNode != "" {
		if rd.Node != "" && rd.Node != tokenNode {
			writeError(w, http.StatusForbidden, fmt.Errorf("a reading of node %q with the token of node %s", rd.Node, tokenNode))
			return
		}
		rd.Node = tokenNode
	}
	out, err := p.report(rd)
	switch {
	case errors.Is(err, errDuplicate):
		writeJSON(w, http.StatusOK, struct {
			reportOutcome
			Duplicate bool `json:"duplicate"`
		}{out, true})
	case err != nil:
		writeError(w, statusOf(err), err)
	default:
		writeJSON(w, http.StatusOK, out)
	}
}

// admitAnswer is /admit's body.
type admitAnswer struct {
	Node   string `json:"node"`
	Admit  bool   `json:"admit"`
	Reason string `json:"reason,omitempty"` // paused, overloaded, cool-down, full
	Why    string `json:"why,omitempty"`    // the reason in words
	// At is the instant the answer holds for; Until, during a cool-down,
	// when the node is offered again (unless something else intervenes).
	At    time.Time `json:"at"`
	Until time.Time `json:"until,omitzero"`
}

func (p *platform) handleAdmit(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("node")
	if id == "" {
		writeError(w, http.StatusBadRequest, errors.New("admit: ?node= is required"))
		return
	}
	a, err := p.admit(id)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// serve decodes an operator's request into a Req, does it and answers
// with the result at status (204: no body), 409 with the admit answer for
// a node that takes nobody new, or the error's status.
func serve[Req, Resp any](status int, do func(Req) (Resp, error)) func(http.ResponseWriter, *http.Request, string) {
	return func(w http.ResponseWriter, r *http.Request, _ string) {
		var req Req
		if !decode(w, r, &req) {
			return
		}
		resp, err := do(req)
		var ae admitError
		switch {
		case errors.As(err, &ae):
			writeJSON(w, http.StatusConflict, ae.answer)
		case err != nil:
			writeError(w, statusOf(err), err)
		case status == http.StatusNoContent:
			w.WriteHeader(status)
		default:
			writeJSON(w, status, resp)
		}
	}
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("request body: %w", err))
		return false
	}
	return true
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, errUnknown):
		return http.StatusNotFound
	case errors.Is(err, errBadInput):
		return http.StatusBadRequest
	case errors.Is(err, errStale):
		return http.StatusConflict
	case errors.Is(err, errNotAdmit):
		return http.StatusConflict
	default:
		return http.StatusInternalServerError
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": strings.TrimSpace(err.Error())})
}
