// Package webhookreceiver is the operator's side of the platform's
// notices: it verifies a Standard Webhooks message (the signature, with a
// constant-time compare, and a timestamp within five minutes) and drops
// a message whose webhook-id it has seen already, so a notice the
// platform delivered twice (it delivers at least once) is acted on once.
//
//	h := webhookreceiver.Handler([]string{os.Getenv("NOTIFY_SECRET")}, func(m webhookreceiver.Message) error {
//		log.Printf("%s: %s", m.Type, m.Data.Text) // "eu-01 is overloaded: memory at 92 %"
//		return nil
//	})
//	http.ListenAndServe(":9000", h)
//
// The secret is the one the platform's -notify-file gives this receiver
// ("whsec_" and base64). While a secret is rotated, pass both: a message
// verifies if any signature matches any secret.
//
// Handler keeps the ids it has seen in memory, for a day: several
// instances behind one URL, or one that restarts, should keep them where
// they are shared instead (a UNIQUE column in their database, inserted in
// the transaction that acts on the message).
package webhookreceiver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Tolerance is how far a message's webhook-timestamp may be from the
// receiver's clock: older is a replay, newer a clock to fix.
const Tolerance = 5 * time.Minute

// Errors Verify returns, wrapped.
var (
	ErrSignature = errors.New("no valid signature")
	ErrTimestamp = errors.New("timestamp outside the tolerance")
	ErrHeaders   = errors.New("missing or malformed webhook headers")
)

// Message is the platform's payload.
type Message struct {
	Type      string    `json:"type"` // node.overloaded, node.overload_ended
	Timestamp time.Time `json:"timestamp"`
	Data      struct {
		Node     string    `json:"node"`
		At       time.Time `json:"at"`       // the reading's own time, by the node's clock
		Received time.Time `json:"received"` // when the platform received it, by its clock
		Text     string    `json:"text"`     // "eu-01 is overloaded: memory at 92 %"
		Lasted   string    `json:"lasted,omitempty"`
		Findings []struct {
			Check   string             `json:"check"`
			Text    string             `json:"text"`
			Figures map[string]float64 `json:"figures"`
			Link    string             `json:"link,omitempty"`
		} `json:"findings,omitempty"`
	} `json:"data"`
}

// Verify checks a message's headers against its body at now, with any of
// secrets ("whsec_…"), and returns its webhook-id.
func Verify(secrets []string, h http.Header, body []byte, now time.Time) (string, error) {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return "", fmt.Errorf("%w: want webhook-id, webhook-timestamp and webhook-signature", ErrHeaders)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: webhook-timestamp %q: want Unix seconds", ErrHeaders, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > Tolerance || d < -Tolerance {
		return "", fmt.Errorf("%w: %v from this clock", ErrTimestamp, d.Round(time.Second))
	}
	for _, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil {
			return "", fmt.Errorf("secret: %w", err)
		}
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%s.", id, ts)
		mac.Write(body)
		want := mac.Sum(nil)
		for _, sig := range strings.Fields(sigs) {
			b64, ok := strings.CutPrefix(sig, "v1,")
			if !ok {
				continue // another scheme
			}
			got, err := base64.StdEncoding.DecodeString(b64)
			if err == nil && hmac.Equal(got, want) {
				return id, nil
			}
		}
	}
	return "", ErrSignature
}

// Seen remembers webhook-ids for a while, to drop duplicates.
type Seen struct {
	// Keep is how long an id is remembered; zero: 25 hours (the
	// platform retries a delivery for up to 24).
	Keep time.Duration

	mu    sync.Mutex
	ids   map[string]time.Time
	added int
}

// Add records id at now and reports whether it is new.
func (s *Seen) Add(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := s.Keep
	if keep <= 0 {
		keep = 25 * time.Hour
	}
	if s.ids == nil {
		s.ids = map[string]time.Time{}
	}
	if at, ok := s.ids[id]; ok && now.Sub(at) < keep {
		return false
	}
	s.ids[id] = now
	if s.added++; s.added%1024 == 0 {
		for k, at := range s.ids {
			if now.Sub(at) >= keep {
				delete(s.ids, k)
			}
		}
	}
	return true
}

// Forget takes id back, for a message whose handling failed: its retry
// is handled again.
func (s *Seen) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, id)
}

// Handler verifies each message, drops one seen already (answering 200,
// so it is not retried) and passes the others to handle. It answers 401
// for a message that does not verify (the platform fails it at once),
// and 500 when handle fails (the platform retries it).
func Handler(secrets []string, handle func(Message) error) http.Handler {
	seen := &Seen{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		id, err := Verify(secrets, r.Header, body, time.Now())
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var m Message
		if err := json.Unmarshal(body, &m); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if !seen.Add(id, time.Now()) {
			w.WriteHeader(http.StatusOK) // a duplicate: acted on already
			return
		}
		if err := handle(m); err != nil {
			seen.Forget(id)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
