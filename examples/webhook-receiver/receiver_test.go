package webhookreceiver

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	// The Standard Webhooks specification's own example.
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"test": 2432232314}`)
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,wrongsig= v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	at := time.Unix(1614265330, 0)
	if _, err := Verify([]string{secret}, h, body, at); err != nil {
		t.Fatalf("the specification's example: %v", err)
	}
	if _, err := Verify([]string{"whsec_" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", secret}, h, body, at); err != nil {
		t.Fatalf("with a second secret: %v", err)
	}
	if _, err := Verify([]string{secret}, h, []byte(`{"test": 2432232315}`), at); !errors.Is(err, ErrSignature) {
		t.Errorf("another body: %v, want ErrSignature", err)
	}
	if _, err := Verify([]string{secret}, h, body, at.Add(Tolerance+time.Second)); !errors.Is(err, ErrTimestamp) {
		t.Errorf("late: %v, want ErrTimestamp", err)
	}
	if _, err := Verify([]string{secret}, h, body, at.Add(-Tolerance-time.Second)); !errors.Is(err, ErrTimestamp) {
		t.Errorf("early: %v, want ErrTimestamp", err)
	}
	h.Del("webhook-id")
	if _, err := Verify([]string{secret}, h, body, at); !errors.Is(err, ErrHeaders) {
		t.Errorf("no id: %v, want ErrHeaders", err)
	}
}

func TestSeen(t *testing.T) {
	var s Seen
	s.Keep = time.Hour
	now := time.Unix(1e9, 0)
	if !s.Add("a", now) || s.Add("a", now.Add(time.Minute)) {
		t.Fatal("a second add of an id must be refused")
	}
	if !s.Add("a", now.Add(2*time.Hour)) {
		t.Fatal("an id is forgotten after Keep")
	}
	s.Forget("a")
	if !s.Add("a", now.Add(2*time.Hour)) {
		t.Fatal("a forgotten id is new again")
	}
}
