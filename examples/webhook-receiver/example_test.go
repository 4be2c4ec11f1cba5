package webhookreceiver_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	webhookreceiver "github.com/proofkit/nodekit/examples/webhook-receiver"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// signed is a request as the platform sends it.
func signed(id string, ts time.Time, body string) *http.Request {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.%s", id, ts.Unix(), body)
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	r.Header.Set("webhook-id", id)
	r.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	r.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return r
}

func ExampleHandler() {
	h := webhookreceiver.Handler([]string{secret}, func(m webhookreceiver.Message) error {
		fmt.Println(m.Type, m.Data.Text)
		return nil
	})
	body := `{"type":"node.overloaded","data":{"node":"eu-01","text":"eu-01 is overloaded: memory at 92 %"}}`
	for _, r := range []*http.Request{
		signed("ntc_eu-01_1", time.Now(), body),
		signed("ntc_eu-01_1", time.Now(), body),                      // the same id again: dropped
		signed("ntc_eu-01_2", time.Now().Add(-10*time.Minute), body), // too old
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code)
	}
	// Output:
	// node.overloaded eu-01 is overloaded: memory at 92 %
	// 204
	// 200
	// 401
}
