package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/filestore"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
)

// Post sends body to path with the admin's token and returns the
// status and the body's reason and duplicate fields.
func (tp *Platform) Post(path string, body any) (int, string, bool) {
	tp.T.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		tp.T.Fatal(err)
	}
	req, err := http.NewRequest("POST", tp.Srv.URL+path, bytes.NewReader(b))
	if err != nil {
		tp.T.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+platformtest.TestToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error(), false
	}
	defer resp.Body.Close()
	var ans struct {
		Reason    string `json:"reason"`
		Duplicate bool   `json:"duplicate"`
	}
	json.NewDecoder(resp.Body).Decode(&ans)
	return resp.StatusCode, ans.Reason, ans.Duplicate
}

// AllEvents pages through node id's events, limit at a time, by the
// pages' Link headers.
func (tp *Platform) AllEvents(id string, limit int) []store.NumberedEvent {
	tp.T.Helper()
	var all []store.NumberedEvent
	for path := fmt.Sprintf("/nodes/%s/events?limit=%d", id, limit); path != ""; {
		code, header, b := tp.Raw("GET", path, platformtest.TestToken, "")
		var page store.EventPage
		if err := json.Unmarshal(b, &page); code != 200 || err != nil {
			tp.T.Fatalf("GET %s: %d, %v: %s", path, code, err, b)
		}
		if len(page.Events) > limit {
			tp.T.Fatalf("a page of %d events, limit %d", len(page.Events), limit)
		}
		all = append(all, page.Events...)
		path = platformtest.NextLink(tp.T, path, header)
	}
	return all
}

// Platform is a platform served by an httptest server, with the clock
// it runs on and its store.
type Platform struct {
	T     *testing.T
	Clock *platformtest.Clock
	Dir   string
	P     *filestore.Store // the file store; nil for PostgreSQL
	Svc   store.Store
	Srv   *httptest.Server
}

// NewPlatform opens the file store in dir with seed, on clock c, and
// serves it (Serve).
func NewPlatform(t *testing.T, dir string, c *platformtest.Clock, seed *store.SeedFile) *Platform {
	t.Helper()
	p, err := filestore.Open(store.Config{StateDir: dir, Now: c.Now, Logger: platformtest.Logger(t)}, seed)
	if err != nil {
		t.Fatal(err)
	}
	tp := Serve(t, c, p)
	tp.Dir, tp.P = dir, p
	return tp
}

// Serve serves svc's use cases through api.Handler, with the admin's
// token (platformtest.TestToken) and x1's agent token "x1-token".
func Serve(t *testing.T, c *platformtest.Clock, svc store.Store) *Platform {
	srv := httptest.NewServer(api.Handler(fleet.New(svc, nil), api.Tokens{platformtest.TestToken: "", "x1-token": "x1"}))
	t.Cleanup(srv.Close)
	return &Platform{T: t, Clock: c, Svc: svc, Srv: srv}
}

// Raw sends body (none when empty) to path with "Authorization: Bearer
// token" (none when token is empty) and returns the answer's status,
// header and body.
func (tp *Platform) Raw(method, path, token, body string) (int, http.Header, []byte) {
	tp.T.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, tp.Srv.URL+path, rd)
	if err != nil {
		tp.T.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tp.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// Do sends body as JSON with the admin's token and decodes a 2xx
// answer into out, if given.
func (tp *Platform) Do(method, path string, body any, out any) int {
	tp.T.Helper()
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			tp.T.Fatal(err)
		}
	}
	code, _, ans := tp.Raw(method, path, platformtest.TestToken, string(b))
	if out != nil && code < 300 {
		if err := json.Unmarshal(ans, out); err != nil {
			tp.T.Fatalf("%s %s: %v: %s", method, path, err, ans)
		}
	}
	return code
}

// Read sends a reading of node at the clock's time.
func (tp *Platform) Read(node string, mem float64) int {
	tp.T.Helper()
	return tp.Do("POST", "/report", overload.Reading{Node: node, At: tp.Clock.Now(), MemoryUsedPercent: mem,
		CPUs: 4, ConntrackMax: 262144}, nil)
}

// ReadRounds sends rounds readings of each of nodes, with memory at mem
// percent: a round reads every node, in order, at one instant, and the
// clock moves on 30 s after each. Each reading must be taken (200).
func (tp *Platform) ReadRounds(nodes []string, mem float64, rounds int) {
	tp.T.Helper()
	for range rounds {
		for _, n := range nodes {
			if code := tp.Read(n, mem); code != 200 {
				tp.T.Fatalf("reading of %s: %d", n, code)
			}
		}
		tp.Clock.Add(30 * time.Second)
	}
}

// Admit is GET /admit?node=node's answer.
func (tp *Platform) Admit(node string) fleet.AdmitAnswer {
	tp.T.Helper()
	var a fleet.AdmitAnswer
	if code := tp.Do("GET", "/admit?node="+node, nil, &a); code != 200 {
		tp.T.Fatalf("/admit?node=%s: %d", node, code)
	}
	return a
}

// Node is GET /nodes/id's answer.
func (tp *Platform) Node(id string) fleet.NodeView {
	tp.T.Helper()
	var v fleet.NodeView
	if code := tp.Do("GET", "/nodes/"+id, nil, &v); code != 200 {
		tp.T.Fatalf("/nodes/%s: %d", id, code)
	}
	return v
}
