package agent

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// TestRetrySchedule is the schedule docs/agent.md gives: after the n-th
// failed attempt in a row the agent waits 1 s, 2 s, 4 s, … doubling to
// at most the interval (RetryMax), each spread over [0.8, 1.2) of itself.
// At the default 30 s interval: 0.8–1.2 s, 1.6–2.4 s, 3.2–4.8 s,
// 6.4–9.6 s, 12.8–19.2 s, then 24–36 s.
func TestRetrySchedule(t *testing.T) {
	want := []struct{ lo, hi time.Duration }{
		{800 * time.Millisecond, 1200 * time.Millisecond},
		{1600 * time.Millisecond, 2400 * time.Millisecond},
		{3200 * time.Millisecond, 4800 * time.Millisecond},
		{6400 * time.Millisecond, 9600 * time.Millisecond},
		{12800 * time.Millisecond, 19200 * time.Millisecond},
		{24 * time.Second, 36 * time.Second},
		{24 * time.Second, 36 * time.Second},
	}
	backoff := time.Duration(0)
	for i, w := range want {
		backoff = nextBackoff(backoff, time.Second, DefaultInterval)
		lo, hi := retryWait(backoff, 0, 0), retryWait(backoff, 0.999999999, 0)
		if lo != w.lo || hi > w.hi || hi < w.hi-time.Millisecond {
			t.Errorf("attempt %d: waits %v–%v, want %v–%v", i+1, lo, hi, w.lo, w.hi)
		}
		if mid := retryWait(backoff, 0.5, 0); mid != backoff {
			t.Errorf("attempt %d: the middle of the spread is %v, want the back-off %v", i+1, mid, backoff)
		}
	}
}

// TestRetryScheduleInTheLoop: the waits the reporter logs, against a
// platform that answers 503 five times, follow the same schedule (scaled
// down: 10 ms doubling to 80 ms, the spread fixed at its middle).
func TestRetryScheduleInTheLoop(t *testing.T) {
	var mu sync.Mutex
	tries := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if tries++; tries <= 5 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	var log testkit.LogBuffer
	a, _ := reportingAgent(t, h, &log, Config{RetryMax: 80 * time.Millisecond})
	a.rep.retryMin = 10 * time.Millisecond
	a.rep.rand = func() float64 { return 0.5 }
	sendAll(t, a, 1)
	var got []string
	for _, m := range regexp.MustCompile(`retry_in=(\S+)`).FindAllStringSubmatch(log.String(), -1) {
		got = append(got, m[1])
	}
	if want := "10ms 20ms 40ms 80ms 80ms"; strings.Join(got, " ") != want {
		t.Errorf("waits %q, want %s", got, want)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 30, 0, 0, time.UTC)
	tests := []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"120", 2 * time.Minute},
		{" 7 ", 7 * time.Second},
		{"0", 0},
		{"-5", 0},
		{"1.5", 0},
		{"soon", 0},
		{"99999999999999999999", 0}, // does not parse as a number: malformed
		{"86400", maxRetryAfter},
		{"Thu, 03 Dec 2026 09:31:30 GMT", 90 * time.Second},   // RFC 9110's form
		{"Thursday, 03-Dec-26 09:30:05 GMT", 5 * time.Second}, // RFC 850
		{"Thu Dec  3 09:30:20 2026", 20 * time.Second},        // asctime
		{"Thu, 03 Dec 2026 09:29:00 GMT", 0},                  // past
		{"Fri, 04 Dec 2026 09:30:00 GMT", 24 * time.Hour},     // bounded by retryWait
		{"Thu, 03 Dec 2026 09:31:30 +0000", 0},                // not an HTTP date
	}
	for _, tt := range tests {
		if got := retryAfter(tt.header, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tt.header, got, tt.want)
		}
	}
	if got := retryWait(time.Second, 0.5, 24*time.Hour); got != maxRetryAfter {
		t.Errorf("a Retry-After of a day waits %v, want the bound %v", got, maxRetryAfter)
	}
	if got := retryWait(8*time.Second, 0.5, 3*time.Second); got != 8*time.Second {
		t.Errorf("a Retry-After shorter than the back-off waits %v, want the back-off", got)
	}
}

// TestStalledUploadIsResent: the platform's answers to a body that
// stalls (examples/platform answers 408 "incomplete" with Retry-After: 1;
// a proxy may answer 503; Retry-After in seconds or as an HTTP date)
// and to a busy platform (429, 5xx) keep the report: it is sent again
// after the wait the platform asked for, and counted once. 413 (the body
// is too large) still drops it.
func TestStalledUploadIsResent(t *testing.T) {
	date := func() string { return time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat) }
	tests := []struct {
		status     int
		label      string
		retryAfter func() string
		minWait    time.Duration // an HTTP date has whole seconds: 2 s ahead is at least 1 s
		delivered  bool
	}{
		{http.StatusRequestTimeout, "seconds", func() string { return "1" }, time.Second, true},
		{http.StatusRequestTimeout, "date", date, time.Second, true},
		{http.StatusServiceUnavailable, "date", date, time.Second, true},
		{http.StatusTooManyRequests, "seconds", func() string { return "1" }, time.Second, true},
		{http.StatusBadGateway, "", nil, 0, true},
		{http.StatusRequestEntityTooLarge, "", nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSpace(fmt.Sprintf("%d %s", tt.status, tt.label)), func(t *testing.T) {
			var mu sync.Mutex
			var at []time.Time
			p := &protoPlatform{answer: func(try int) (int, string, string) {
				mu.Lock()
				at = append(at, time.Now())
				mu.Unlock()
				if try == 1 {
					return tt.status, `{"error": "the body stalled", "reason": "incomplete"}`, "" // the platform's answer
				}
				return 0, "", ""
			}}
			first := true
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				if tt.retryAfter != nil && first {
					w.Header().Set("Retry-After", tt.retryAfter())
				}
				first = false
				mu.Unlock()
				p.ServeHTTP(w, r)
			})
			var log testkit.LogBuffer
			a, _ := reportingAgent(t, h, &log, Config{})
			sendAll(t, a, 1)
			if got := len(p.readings()); got != map[bool]int{true: 1, false: 0}[tt.delivered] {
				t.Fatalf("counted %d readings, want delivered=%v\n%s", got, tt.delivered, log.String())
			}
			if !tt.delivered {
				if !strings.Contains(log.String(), "platform refused a report; dropped it") {
					t.Errorf("the refusal is not logged:\n%s", log.String())
				}
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if len(at) != 2 {
				t.Fatalf("%d attempts, want 2", len(at))
			}
			if wait := at[1].Sub(at[0]); wait < tt.minWait {
				t.Errorf("sent again after %v, before the Retry-After's %v", wait, tt.minWait)
			}
		})
	}
}
