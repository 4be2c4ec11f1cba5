package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/notify"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
)

// MaxBody bounds a request body; a reading is a few hundred bytes.
const MaxBody = 1 << 20

// pageLimit parses a list's ?limit=: 1 to MaxPage, MaxPage when not
// given.
func pageLimit(list, s string) (int, error) {
	if s == "" {
		return fleet.MaxPage, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > fleet.MaxPage {
		return 0, fmt.Errorf("%s: limit=%.20q: want 1 to %d: %w", list, s, fleet.MaxPage, store.ErrBadInput)
	}
	return n, nil
}

// page is one page of a list: its body, and the cursor of the page that
// follows, if any may.
type page struct {
	body any
	next string
	more bool
}

// afterNodeID checks a list's ?after= that is a node id (GET /nodes,
// /plans): empty, from the first, or an id by the node-id rule.
func afterNodeID(list, s string) error {
	if s != "" && overload.CheckNode(s) != nil {
		return fmt.Errorf("%s: after=%.80q: want a node id (%s), the value of the previous page's Link: %w", list, s, overload.NodeRule, store.ErrBadInput)
	}
	return nil
}

// parseNoticeCursor parses GET /notices' ?after=: a notice's id, 0 or
// more (0 or none: from the first).
func parseNoticeCursor(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 0 {
		return 0, fmt.Errorf("notices: after=%.80q: want a notice id, 0 or more (the previous page's Link names it): %w", s, store.ErrBadInput)
	}
	return id, nil
}

// requestTimeout bounds the work of one request, every store call in it
// included (store.RequestTimeout).
const requestTimeout = store.RequestTimeout

// Refusal reasons, the "reason" word of every error body (the report
// protocol's words, and a few of the operator endpoints').
const (
	ReasonOlder        = "older"
	ReasonInvalid      = "invalid"
	ReasonUnauthorized = "unauthorized"
	ReasonTooLarge     = "too_large"
	reasonIncomplete   = "incomplete"
	reasonUnknownNode  = "unknown_node"
	reasonNotInTable   = "not_registered"
	reasonNotFound     = "not_found"
	reasonNotAdmitted  = "not_admitted"
	reasonMethod       = "method_not_allowed"
	ReasonUnsaved      = "unsaved"
	ReasonUnavailable  = "unavailable"
	reasonInternal     = "internal"
)

// Handler serves the platform's API. Every endpoint but GET /healthz needs
// "Authorization: Bearer <token>", and answers by who the token speaks
// for (docs/platform.md has the table): the admin may do anything; an
// operator reads and sets their own nodes only, and a node that is not
// theirs answers as a node that does not exist; a node's agent may only
// report for its node.
func Handler(f *fleet.Fleet, toks Tokens) *API {
	mux := http.NewServeMux()
	// Each node's operator, by the route table and the token file: the
	// fleet's too, whose operators' receivers take their nodes' notices.
	ks := newKeys(toks)
	f.SetOwners(ownersWith(toks, f.Owners))
	a := &API{f: f, keys: ks}
	// auth serves h to the admin, and to an operator when operators may.
	auth := func(operatorMay bool, h func(w http.ResponseWriter, r *http.Request, id identity)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			id, ok := authorize(ks, w, r)
			if !ok {
				return
			}
			switch {
			case id.node != "":
				writeError(w, http.StatusForbidden, ReasonUnauthorized, fmt.Errorf("the token of node %s may only report", id.node))
				return
			case id.isOperator() && !operatorMay:
				writeError(w, http.StatusForbidden, ReasonUnauthorized, fmt.Errorf("operator %s's token: %s %s is the admin's", id.operator, r.Method, r.URL.Path))
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
			defer cancel()
			r = r.WithContext(ctx)
			limitBody(w, r)
			h(w, r, id)
		}
	}
	// owns reports whether id may see and set node: an operator's own
	// node, or any node for the admin.
	owns := func(id identity, node string) bool { return id.admin() || f.OwnersNow()[node] == id.operator }
	// ownedBy keeps the nodes of id's operator; nil (every node) for the
	// admin.
	ownedBy := func(id identity) func(node string) bool {
		if !id.isOperator() {
			return nil
		}
		owners := f.OwnersNow()
		return func(node string) bool { return owners[node] == id.operator }
	}
	get := func(operatorMay bool, do func(r *http.Request, id identity) (any, error)) http.HandlerFunc {
		return auth(operatorMay, func(w http.ResponseWriter, r *http.Request, id identity) {
			v, err := do(r, id)
			if err != nil {
				writeFailure(w, err)
				return
			}
			writeJSON(w, http.StatusOK, v)
		})
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.Handle("GET /readyz", &readiness{f: f, keys: ks})
	rep := reportHandler{f, ks}
	mux.Handle("POST /report", rep)
	mux.HandleFunc("POST /routes", auth(false, serve(http.StatusCreated, func(ctx context.Context, _ identity, req fleet.OpenRequest) (store.Route, error) {
		return f.Open(ctx, req)
	})))
	mux.HandleFunc("POST /traffic", auth(false, serve(http.StatusOK, func(ctx context.Context, _ identity, req fleet.TrafficRequest) (store.Route, error) {
		return f.Traffic(ctx, req)
	})))
	mux.HandleFunc("POST /price", auth(true, serve(http.StatusNoContent, func(ctx context.Context, id identity, req fleet.PriceRequest) (struct{}, error) {
		if !owns(id, req.Node) {
			return struct{}{}, notYours(req.Node)
		}
		return struct{}{}, f.SetPrice(ctx, req)
	})))
	mux.HandleFunc("POST /max-users", auth(true, serve(http.StatusNoContent, func(ctx context.Context, id identity, req fleet.MaxUsersRequest) (struct{}, error) {
		if !owns(id, req.Node) {
			return struct{}{}, notYours(req.Node)
		}
		return struct{}{}, f.SetMaxUsers(ctx, req)
	})))
	mux.HandleFunc("GET /admit", get(false, func(r *http.Request, _ identity) (any, error) {
		id := r.URL.Query().Get("node")
		if id == "" {
			return nil, fmt.Errorf("admit: ?node= is required: %w", store.ErrBadInput)
		}
		return f.Admit(r.Context(), id)
	}))
	// paged serves a list: do reads the page after after, at most limit
	// items; a page that may be followed by more links the next.
	paged := func(list string, operatorMay bool, do func(r *http.Request, id identity, after string, limit int) (page, error)) http.HandlerFunc {
		return auth(operatorMay, func(w http.ResponseWriter, r *http.Request, id identity) {
			q := r.URL.Query()
			limit, err := pageLimit(list, q.Get("limit"))
			if err != nil {
				writeFailure(w, err)
				return
			}
			pg, err := do(r, id, q.Get("after"), limit)
			if err != nil {
				writeFailure(w, err)
				return
			}
			if pg.more {
				next := url.Values{"after": {pg.next}, "limit": {strconv.Itoa(limit)}}
				w.Header().Set("Link", "<"+r.URL.EscapedPath()+"?"+next.Encode()+`>; rel="next"`)
			}
			writeJSON(w, http.StatusOK, pg.body)
		})
	}
	mux.HandleFunc("GET /nodes", paged("nodes", true, func(r *http.Request, id identity, after string, limit int) (page, error) {
		if err := afterNodeID("nodes", after); err != nil {
			return page{}, err
		}
		if id.isOperator() {
			vs, last, err := f.OperatorViews(r.Context(), fleet.NodesOf(f.OwnersNow(), id.operator), after, limit)
			return page{vs, last, len(vs) == limit}, err
		}
		vs, last, err := f.Views(r.Context(), after, limit)
		return page{vs, last, len(vs) == limit}, err
	}))
	mux.HandleFunc("GET /nodes/{id}", get(true, func(r *http.Request, id identity) (any, error) {
		node := r.PathValue("id")
		if !owns(id, node) {
			return nil, notYours(node)
		}
		v, err := f.View(r.Context(), node)
		if err != nil || id.admin() {
			return v, err
		}
		return fleet.OperatorViewOf(v), nil
	}))
	mux.HandleFunc("GET /nodes/{id}/events", paged("events", true, func(r *http.Request, id identity, after string, limit int) (page, error) {
		node := r.PathValue("id")
		if err := store.CheckNodeID(node); err != nil {
			return page{}, fmt.Errorf("events: %w", err)
		}
		if !owns(id, node) {
			return page{}, fmt.Errorf("events of node %q: %w", node, store.ErrUnknownNode)
		}
		var from int64
		if after != "" {
			var err error
			if from, err = strconv.ParseInt(after, 10, 64); err != nil || from < 0 {
				return page{}, fmt.Errorf("events: after=%.80q: want an event id, 0 or more, the value of the previous page's Link: %w", after, store.ErrBadInput)
			}
		}
		evs, err := f.Events(r.Context(), node, from, limit)
		return page{evs, strconv.FormatInt(evs.Next, 10), evs.Next != 0}, err
	}))
	mux.HandleFunc("GET /notices", paged("notices", true, func(r *http.Request, id identity, after string, limit int) (page, error) {
		from, err := parseNoticeCursor(after)
		if err != nil {
			return page{}, err
		}
		ns, last, err := f.NoticesOf(r.Context(), ownedBy(id), from, limit)
		return page{ns, strconv.FormatInt(last, 10), len(ns) == limit}, err
	}))
	mux.HandleFunc("POST /notices/{id}/redeliver", auth(true, func(w http.ResponseWriter, r *http.Request, id identity) {
		n, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil || n < 1 {
			writeFailure(w, fmt.Errorf("redeliver: notice %.80q: want a notice's id, 1 or more: %w", r.PathValue("id"), store.ErrBadInput))
			return
		}
		if err := f.Redeliver(r.Context(), n, ownedBy(id)); err != nil {
			writeFailure(w, err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	mux.HandleFunc("GET /plans", paged("plans", false, func(r *http.Request, _ identity, after string, limit int) (page, error) {
		if err := afterNodeID("plans", after); err != nil {
			return page{}, err
		}
		ps, last, err := f.Plans(r.Context(), after, limit)
		return page{ps, last, len(ps) == limit}, err
	}))
	mux.HandleFunc("POST /nodes/{id}/pause", auth(false, func(w http.ResponseWriter, r *http.Request, _ identity) {
		if err := f.Pause(r.Context(), r.PathValue("id"), true); err != nil {
			writeFailure(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("POST /nodes/{id}/approve", auth(false, func(w http.ResponseWriter, r *http.Request, _ identity) {
		if err := f.Pause(r.Context(), r.PathValue("id"), false); err != nil {
			writeFailure(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	// An operator's own receiver: theirs alone (the admin has none, and
	// sets receivers in the notify file).
	operatorOnly := func(h func(w http.ResponseWriter, r *http.Request, id identity)) http.HandlerFunc {
		return auth(true, func(w http.ResponseWriter, r *http.Request, id identity) {
			if !id.isOperator() {
				writeError(w, http.StatusForbidden, ReasonUnauthorized, fmt.Errorf("the admin's token: %s %s is an operator's, for their own receiver (the admin's are in the notify file)", r.Method, r.URL.Path))
				return
			}
			h(w, r, id)
		})
	}
	// receiverCall serves an operator's call on their receiver: do's
	// answer, 200.
	receiverCall := func(do func(ctx context.Context, operator string) (any, error)) http.HandlerFunc {
		return operatorOnly(func(w http.ResponseWriter, r *http.Request, id identity) {
			v, err := do(r.Context(), id.operator)
			if err != nil {
				writeFailure(w, err)
				return
			}
			writeJSON(w, http.StatusOK, v)
		})
	}
	mux.HandleFunc("GET /receiver", receiverCall(func(ctx context.Context, op string) (any, error) { return f.ReceiverOf(ctx, op) }))
	mux.HandleFunc("PUT /receiver", operatorOnly(func(w http.ResponseWriter, r *http.Request, id identity) {
		var req fleet.ReceiverRequest
		if !decode(w, r, &req) {
			return
		}
		v, created, err := f.SetReceiver(r.Context(), id.operator, req)
		switch {
		case err != nil:
			writeFailure(w, err)
		case created:
			writeJSON(w, http.StatusCreated, v)
		default:
			writeJSON(w, http.StatusOK, v)
		}
	}))
	mux.HandleFunc("POST /receiver/rotate", receiverCall(func(ctx context.Context, op string) (any, error) { return f.RotateReceiver(ctx, op) }))
	mux.HandleFunc("POST /receiver/enable", receiverCall(func(ctx context.Context, op string) (any, error) { return f.EnableReceiver(ctx, op) }))
	mux.HandleFunc("POST /receiver/test", receiverCall(func(ctx context.Context, op string) (any, error) { return f.TestReceiver(ctx, op) }))
	mux.HandleFunc("GET /metrics", auth(false, func(w http.ResponseWriter, r *http.Request, _ identity) {
		serveMetrics(f.Notify, w, r)
	}))
	serveDashboard(mux, f, ks) // GET /, POST /login, /logout, /dashboard/…: dashboard.go
	a.h = reportFirst{rep, mux}
	return a
}

// API is the platform's API (Handler); Reload puts a token file read
// again in force.
type API struct {
	h    http.Handler
	f    *fleet.Fleet
	keys *keys
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.h.ServeHTTP(w, r) }

// Reload puts toks in force in place of the token file read before, for
// every request from now on: a token taken out is refused at once, and
// a dashboard session logged in with it ends. A file that names a node's
// operator otherwise than the route table does is refused, and the one
// in force kept. The operators' receivers take the nodes toks gives
// them from the next message.
func (a *API) Reload(ctx context.Context, toks Tokens) error {
	if err := CheckOwners(toks, a.f.Owners); err != nil {
		return err
	}
	a.keys.put(toks)
	a.f.SetOwners(ownersWith(toks, a.f.Owners))
	return a.f.RefreshReceivers(ctx)
}

// notYours is the error for a node an operator does not own: the one a
// node that does not exist gets, word for word, so an answer never tells
// an operator that another's node exists.
func notYours(node string) error {
	if err := store.CheckNodeID(node); err != nil {
		return err
	}
	return fmt.Errorf("node %q: %w", node, store.ErrUnknownNode)
}

// reportFirst serves POST /report, which every node sends every 30 s,
// without a look at mux's patterns, and everything else by mux (which
// routes POST /report to the same handler, on a path that is not
// exactly "/report" too).
type reportFirst struct {
	report reportHandler
	mux    *http.ServeMux
}

func (h reportFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/report" {
		h.report.ServeHTTP(w, r)
		return
	}
	if _, pattern := h.mux.Handler(r); pattern == "" {
		unrouted(h.mux, w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// unrouted answers a request no endpoint takes as every refusal is
// answered, in JSON saying what was asked: 405 with the methods the path
// takes (and Allow), or 404. The mux's own answer, a line of plain
// text, says neither.
func unrouted(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	h, _ := mux.Handler(r)
	rec := &statusRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	path := r.URL.Path
	if len(path) > 80 {
		path = path[:80] + "…"
	}
	if q := strconv.Quote(path); q[1:len(q)-1] != path {
		path = q // a control character or bytes that are not UTF-8
	}
	what := r.Method + " " + path
	switch allow := rec.header.Get("Allow"); {
	case rec.status == http.StatusMethodNotAllowed:
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, reasonMethod, fmt.Errorf("%s: the path takes %s only", what, allow))
	case rec.status == http.StatusNotFound:
		writeError(w, http.StatusNotFound, reasonNotFound, fmt.Errorf("%s: no such endpoint", what))
	default:
		h.ServeHTTP(w, r)
	}
}

// statusRecorder keeps the status and headers the mux's own refusal
// writes, and drops its body.
type statusRecorder struct {
	header http.Header
	status int
}

func (s *statusRecorder) Header() http.Header         { return s.header }
func (s *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusRecorder) WriteHeader(status int)      { s.status = status }

// reportHandler is POST /report's handler: auth's token check and body
// bound, and handleReport, without the request's copy that auth makes to
// carry its context (handleReport takes the context as an argument).
type reportHandler struct {
	f    *fleet.Fleet
	keys *keys
}

func (h reportHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := authorize(h.keys, w, r)
	if !ok {
		return
	}
	if id.isOperator() {
		writeError(w, http.StatusForbidden, ReasonUnauthorized, fmt.Errorf("operator %s's token: readings come from a node's agent token", id.operator))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	limitBody(w, r)
	handleReport(ctx, h.f, w, r, id.node)
}

// authorize returns who r's token speaks for; without a known token it
// answers 401 and returns false.
func authorize(ks *keys, w http.ResponseWriter, r *http.Request) (id identity, ok bool) {
	id, ok = ks.lookup(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="platform"`)
		writeError(w, http.StatusUnauthorized, ReasonUnauthorized, errors.New("missing or wrong bearer token"))
	}
	return id, ok
}

// limitBody bounds r's body at MaxBody. A body whose length is given,
// up to MaxBody, cannot run over it (the server reads no more than the
// length), so it is left as it is.
func limitBody(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength < 0 || r.ContentLength > MaxBody {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	}
}

// handleReport takes one overload.Reading. The node is the token's, or,
// for the admin's token, the one the reading names. The answers follow
// the report protocol: 200 for a reading counted now, and 200 with
// "duplicate": true for one already counted (a retry after a lost answer,
// acknowledged so it is not retried for ever); 409 "older" for a version 1
// reading not newer than the latest and 400 "invalid" for one that cannot
// be true (the agent drops both); 413 "too_large"; 408 "incomplete" for
// a body that stalled or broke off (retried); 401/403 "unauthorized"
// (kept and retried: the operator must fix the agent's configuration);
// 503 while the store is unavailable and 500 when this node's state
// cannot be saved (both retried).
func handleReport(ctx context.Context, f *fleet.Fleet, w http.ResponseWriter, r *http.Request, tokenNode string) {
	buf := getBuffer()
	defer putBuffer(buf)
	body, err := readBody(r, *buf)
	*buf = body
	if err != nil {
		writeBodyFailure(w, fmt.Errorf("reading body: %w", err))
		return
	}
	var rd overload.Reading
	// UnmarshalJSON decodes a reading an agent sends without
	// encoding/json's first pass over the body and its reflection; for
	// anything else, json.Unmarshal, which calls it, gives the error as
	// it words it.
	if rd.UnmarshalJSON(body) != nil {
		// Into again, not rd, which then stays on the stack. Unmarshal
		// validates, and checks "v".
		var again overload.Reading
		if err := json.Unmarshal(body, &again); err != nil {
			writeError(w, http.StatusBadRequest, ReasonInvalid, fmt.Errorf("reading: %w", err))
			return
		}
		rd = again
	}
	if tokenNode != "" {
		if rd.Node != "" && rd.Node != tokenNode {
			writeError(w, http.StatusForbidden, ReasonUnauthorized, fmt.Errorf("a reading of node %q with the token of node %s", rd.Node, tokenNode))
			return
		}
		rd.Node = tokenNode
	}
	out, err := f.Report(ctx, rd)
	dup := errors.Is(err, store.ErrDuplicate)
	switch {
	case err != nil && !dup:
		writeFailure(w, err)
	case out.Event != nil || out.Notice != nil || !plainJSON(out.Node):
		if dup {
			writeJSON(w, http.StatusOK, struct {
				fleet.ReportOutcome
				Duplicate bool `json:"duplicate"`
			}{out, true})
			return
		}
		writeJSON(w, http.StatusOK, out)
	default:
		// Most answers: a node's name and whether it is overloaded.
		b := appendPlainAnswer((*buf)[:0], out, dup)
		*buf = b
		w.Header()["Content-Type"] = jsonContentType
		w.WriteHeader(http.StatusOK)
		w.Write(b)
	}
}

// appendPlainAnswer appends the answer to a report that started and
// ended nothing, as writeJSON writes it: the node's name, whether it is
// overloaded, and whether it was a duplicate. Every quiet report is
// answered so, and by hand it costs a small part of writeJSON's time
// (BenchmarkReportAnswer, side by side in one run, medians of 6: 49 ns
// and no allocation, against 4.1 µs and 3 allocations).
func appendPlainAnswer(b []byte, out fleet.ReportOutcome, dup bool) []byte {
	b = append(b, "{\n  \"node\": \""...)
	b = append(b, out.Node...)
	b = append(b, "\",\n  \"overloaded\": "...)
	b = strconv.AppendBool(b, out.Overloaded)
	if dup {
		b = append(b, ",\n  \"duplicate\": true"...)
	}
	return append(b, "\n}\n"...)
}

// plainJSON reports whether s is written in JSON as it is, between
// quotes, by encoding/json: printable ASCII but " \\ < > &.
func plainJSON(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// jsonContentType is every JSON answer's Content-Type, as the header
// map's value: the server only reads it.
var jsonContentType = []string{"application/json"}

// readBody reads r's body after what b holds, as io.ReadAll does, and
// returns b with it.
func readBody(r *http.Request, b []byte) ([]byte, error) {
	if n := r.ContentLength; n > 0 && n <= MaxBody {
		b = slices.Grow(b, int(n)+1) // +1: EOF is read into spare room
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// maxPooled bounds the buffers kept for reuse: a reading is a few
// hundred bytes, and a body near MaxBody is not worth keeping.
const maxPooled = 64 << 10

// buffers holds *[]byte of reports' bodies and answers for reuse.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func getBuffer() *[]byte { return buffers.Get().(*[]byte) }

func putBuffer(b *[]byte) {
	if cap(*b) <= maxPooled {
		*b = (*b)[:0]
		buffers.Put(b)
	}
}

// serve decodes a request into a Req, does it and answers
// with the result at status (204: no body), 409 with the admit answer for
// a node that takes nobody new, or the error's status.
func serve[Req, Resp any](status int, do func(context.Context, identity, Req) (Resp, error)) func(http.ResponseWriter, *http.Request, identity) {
	return func(w http.ResponseWriter, r *http.Request, id identity) {
		var req Req
		if !decode(w, r, &req) {
			return
		}
		resp, err := do(r.Context(), id, req)
		var ae fleet.AdmitError
		switch {
		case errors.As(err, &ae):
			writeJSON(w, http.StatusConflict, struct {
				fleet.AdmitAnswer
				Error string `json:"error"`
			}{ae.Answer, ae.Error()})
		case err != nil:
			writeFailure(w, err)
		case status == http.StatusNoContent:
			w.WriteHeader(status)
		default:
			writeJSON(w, status, resp)
		}
	}
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		writeBodyFailure(w, fmt.Errorf("request body: %w", err))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, ReasonInvalid, fmt.Errorf("request body: %w", err))
		return false
	}
	// One JSON object, nothing after it: a body with more is not what the
	// client meant, so nothing of it is done.
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, ReasonInvalid, errors.New("request body: data after the JSON object"))
		return false
	}
	// A field left out would be taken as its zero value: a price of 0,
	// no cap, a route marked in use by no traffic.
	if rq, ok := v.(interface{ Required() []string }); ok {
		var fields map[string]json.RawMessage
		json.Unmarshal(b, &fields) // v took it as an object, or as null
		for _, name := range rq.Required() {
			if _, ok := fields[name]; !ok {
				writeError(w, http.StatusBadRequest, ReasonInvalid, fmt.Errorf("request body: %q is required", name))
				return false
			}
		}
	}
	return true
}

// writeBodyFailure answers a body that could not be read: 413 "too_large"
// for one over MaxBody, which resending cannot fix; otherwise (it stalled
// past the server's read timeout, or the connection broke mid-body) 408
// "incomplete" with Retry-After, which a client sends again: a slow link
// must not lose a reading.
func writeBodyFailure(w http.ResponseWriter, err error) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, ReasonTooLarge, err)
		return
	}
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusRequestTimeout, reasonIncomplete, err)
}

// statusOf maps an error of the platform to its status and reason word.
func statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, store.ErrUnknownNode):
		return http.StatusNotFound, reasonUnknownNode
	case errors.Is(err, store.ErrNotRegistered):
		return http.StatusConflict, reasonNotInTable
	case errors.Is(err, store.ErrUnknown):
		return http.StatusNotFound, reasonNotFound
	case errors.Is(err, store.ErrBadInput):
		return http.StatusBadRequest, ReasonInvalid
	case errors.Is(err, store.ErrStale):
		return http.StatusConflict, ReasonOlder
	case errors.Is(err, store.ErrNotAdmit):
		return http.StatusConflict, reasonNotAdmitted
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, ReasonUnavailable
	case errors.Is(err, store.ErrUnsaved):
		return http.StatusInternalServerError, ReasonUnsaved
	default:
		return http.StatusInternalServerError, reasonInternal
	}
}

// failureOf is err's status, reason word and the error to answer: for
// an unknown node, the same words for every node that is not there and
// for another operator's, since naming the node would make the answers
// differ by the one thing the caller may not learn from them.
func failureOf(err error) (int, string, error) {
	status, reason := statusOf(err)
	if reason == reasonUnknownNode {
		err = store.ErrUnknownNode
	}
	return status, reason, err
}

func writeFailure(w http.ResponseWriter, err error) {
	status, reason, err := failureOf(err)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeError(w, status, reason, err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeError(w, http.StatusInternalServerError, reasonInternal, fmt.Errorf("answer: %w", err))
		return
	}
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeError answers {"error": "...", "reason": "..."}.
func writeError(w http.ResponseWriter, status int, reason string, err error) {
	b, _ := json.Marshal(map[string]string{"error": strings.TrimSpace(err.Error()), "reason": reason})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// serveMetrics answers GET /metrics in the Prometheus text format
// (notify.Notifier.WriteMetrics).
func serveMetrics(n *notify.Notifier, w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	if err := n.WriteMetrics(r.Context(), &b); err != nil {
		writeFailure(w, fmt.Errorf("metrics: %w", err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(b.Bytes())
}
