package api_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/examples/platform/internal/api"
	"github.com/proofkit/nodekit/examples/platform/internal/apitest"
	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
	"github.com/proofkit/nodekit/overload"
)

// A node that reports but is not in the route table is listed to its
// operator, and what it cannot have yet (a price, a cap, routes, a
// pause) is refused as that, 409 not_registered, not as a node that does
// not exist; to another operator it is still a node that does not exist,
// word for word.
func TestNotInTheRouteTable(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		c := &platformtest.Clock{T: platformtest.T0}
		tp := open(c, dashboardSeed())
		tokens := api.Tokens{platformtest.TestToken: "", "tok-alice": "operator:alice", "tok-bob": "operator:bob", "tok-n9": "n9 operator:alice"}
		srv := httptest.NewServer(api.Handler(fleet.New(tp.Svc, nil), tokens))
		defer srv.Close()
		web := &apitest.Platform{T: t, Srv: srv}
		rd, _ := json.Marshal(overload.Reading{Node: "n9", At: c.Now(), MemoryUsedPercent: 40, CPUs: 4, ConntrackMax: 262144})
		if code, _, b := web.Raw("POST", "/report", "tok-n9", string(rd)); code != 200 {
			t.Fatalf("n9's reading: %d %s", code, b)
		}
		if code, _, b := web.Raw("GET", "/nodes/n9", "tok-alice", ""); code != 200 || !strings.Contains(string(b), "not in the route table") {
			t.Fatalf("alice's view of n9: %d %s", code, b)
		}
		for _, tt := range []struct{ method, path, body, token string }{
			{"POST", "/price", `{"node":"n9","price":5}`, "tok-alice"},
			{"POST", "/max-users", `{"node":"n9","max_users":5}`, "tok-alice"},
			{"POST", "/price", `{"node":"n9","price":5}`, platformtest.TestToken},
			{"POST", "/routes", `{"node":"n9","user":"u","key":"k"}`, platformtest.TestToken},
			{"POST", "/nodes/n9/pause", "", platformtest.TestToken},
			{"POST", "/nodes/n9/approve", "", platformtest.TestToken},
		} {
			code, _, b := web.Raw(tt.method, tt.path, tt.token, tt.body)
			if code != 409 || !strings.Contains(string(b), `"reason":"not_registered"`) || !strings.Contains(string(b), "not in the route table") {
				t.Errorf("%s %s %s as %s: %d %s, want 409 not_registered", tt.method, tt.path, tt.body, tt.token, code, b)
			}
		}
		_, _, unknown := web.Raw("POST", "/price", "tok-bob", `{"node":"zz","price":5}`)
		code, _, b := web.Raw("POST", "/price", "tok-bob", `{"node":"n9","price":5}`)
		if want := strings.ReplaceAll(string(unknown), "zz", "n9"); code != 404 || string(b) != want {
			t.Errorf("bob's price of alice's n9: %d %s, want 404 %s", code, b, want)
		}
	})
}
