package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// outcome is what the platform's answer means for a report.
type outcome int

const (
	// accepted: 2xx, or 409 (the platform already holds this reading, e.g.
	// sent before a crash that came before the queue was trimmed).
	accepted outcome = iota
	// rejected: the platform refuses this report itself (400, 413, 422 and
	// other 4xx not listed under retry). Sending it again would be refused
	// again, so it is dropped, logged and counted; the queue moves on.
	rejected
	// retry: the platform is down or busy (network error, timeout, 5xx,
	// 408, 429), or not found (404: a URL to fix, not the report's
	// fault). The report stays at the head of the queue and is sent again
	// after a back-off.
	retry
	// refused: the platform does not let the agent in (401, 403): most
	// often a token rotated since the agent read it. The report stays at
	// the head of the queue, as for retry; an agent with a token file
	// reads it again first, and if that gives a new token the report goes
	// again at once with it.
	refused
)

// classify maps an HTTP status to an outcome.
func classify(status int) outcome {
	switch {
	case status >= 200 && status < 300, status == http.StatusConflict:
		return accepted
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return refused
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests,
		status == http.StatusNotFound:
		return retry
	case status >= 400 && status < 500:
		return rejected
	default: // 5xx, and 1xx/3xx that the client did not follow
		return retry
	}
}

// reporter sends the queued reports to the platform, oldest first, one at
// a time, with a capped exponential back-off while the platform does not
// answer.
type reporter struct {
	url       string
	tok       *bearer
	userAgent string
	client    *http.Client
	q         *queue
	log       *slog.Logger
	m         *metrics
	retryMin  time.Duration
	retryMax  time.Duration
	wake      chan struct{}
}

// enqueue stores a report and wakes the sender.
func (r *reporter) enqueue(body []byte) error {
	dropped, err := r.q.push(body)
	if dropped > 0 {
		r.m.reportsDropped.WithLabelValues("overflow").Add(float64(dropped))
		r.log.Warn("report queue full; dropped the oldest reports",
			"dropped", dropped, "queue_max", r.q.max)
	}
	r.m.reportsQueued.Set(float64(r.q.len()))
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return err
}

// run sends until ctx ends. A report in flight when ctx ends stays queued.
func (r *reporter) run(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		seq, body, ok := r.q.head()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
				continue
			}
		}
		// A token set while the last report waited is sent now: no
		// need to cut a later back-off short for it.
		select {
		case <-r.tok.changed:
		default:
		}
		token := r.tok.get()
		out, detail, after := r.send(ctx, body, token)
		if ctx.Err() != nil {
			return
		}
		if out == refused && r.newToken(token, detail) {
			r.m.reportFailures.Inc()
			backoff = 0
			continue
		}
		switch out {
		case accepted:
			backoff = 0
			r.m.reportsSent.Inc()
			if err := r.q.remove(seq); err != nil {
				r.log.Error("could not trim the report queue", "err", err)
			}
		case rejected:
			backoff = 0
			r.m.reportsDropped.WithLabelValues("rejected").Inc()
			r.log.Error("platform rejected a report; dropped it", "reason", detail, "report", string(body))
			if err := r.q.remove(seq); err != nil {
				r.log.Error("could not trim the report queue", "err", err)
			}
		case retry, refused:
			r.m.reportFailures.Inc()
			backoff = nextBackoff(backoff, r.retryMin, r.retryMax)
			wait := jitter(backoff)
			if after > wait {
				wait = min(after, maxRetryAfter)
			}
			r.log.Warn("report not delivered; will retry", "reason", detail,
				"queued", r.q.len(), "retry_in", wait.Round(time.Millisecond))
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			case <-r.tok.changed: // ReloadToken: try the new token now
				t.Stop()
				backoff = 0
			}
		}
		r.m.reportsQueued.Set(float64(r.q.len()))
	}
}

// newToken is called when the platform refused a report sent with token
// (401, 403). It says whether there is another token to send it with now:
// one set by ReloadToken meanwhile, or one found by reading the token file
// again, which a refusal does at most once per gap. A failed read keeps
// the token and logs a warning.
func (r *reporter) newToken(token, detail string) bool {
	if r.tok.get() != token {
		return true
	}
	reread, changed, err := r.tok.refused(time.Now())
	switch {
	case !reread:
		return false
	case err != nil:
		r.log.Warn("the platform refused the token; could not read the token file again, keeping the current token",
			"reason", detail, "err", err)
		return false
	case changed:
		r.log.Info("the platform refused the token; read a new one from the token file, sending again with it",
			"reason", detail, "file", r.tok.file)
		return true
	default:
		r.log.Warn("the platform refused the token, and the token file still holds it; write the new token there",
			"reason", detail, "file", r.tok.file)
		return false
	}
}

// maxRetryAfter bounds how long a platform's Retry-After can hold the
// queue.
const maxRetryAfter = 10 * time.Minute

// send posts one report and says what its answer means, with the
// platform's Retry-After when it gave one.
func (r *reporter) send(ctx context.Context, body []byte, token string) (outcome, string, time.Duration) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return retry, err.Error(), 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if r.userAgent != "" {
		req.Header.Set("User-Agent", r.userAgent)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return retry, err.Error(), 0
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	detail := resp.Status
	if m := bytes.TrimSpace(msg); len(m) > 0 {
		detail = fmt.Sprintf("%s: %s", resp.Status, m)
	}
	out := classify(resp.StatusCode)
	var after time.Duration
	if out == retry || out == refused {
		after = retryAfter(resp.Header.Get("Retry-After"))
	}
	return out, detail, after
}

// retryAfter parses a Retry-After header given in seconds.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// nextBackoff doubles prev within [min, max].
func nextBackoff(prev, min, max time.Duration) time.Duration {
	next := prev * 2
	if next < min {
		next = min
	}
	if next > max {
		next = max
	}
	return next
}

// jitter spreads d over [0.8d, 1.2d] so that nodes whose platform came
// back at the same moment do not all retry in step.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
