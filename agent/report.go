package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// outcome is what the platform's answer means for a report (the report
// protocol of overload.ReadingVersion 2).
type outcome int

const (
	// delivered: 2xx. The platform counted the reading, now or (with a
	// body {"duplicate": true}, or a 409 whose reason is "duplicate")
	// before: a retry after a lost answer. The report leaves the queue.
	delivered outcome = iota
	// refused: the platform refuses this report itself (409 "older",
	// 400/413/422 "invalid"/"too_large", and any other 4xx not listed
	// below). Sending it again would be refused again, so it is dropped,
	// logged and counted by reason, never counted as sent.
	refused
	// retry: the platform is down or busy (network error, timeout, 5xx,
	// 408, 429), or the URL is wrong (404 not found, 405 method not
	// allowed: a URL to fix, not the report's fault). The report stays at the head of the queue and is sent again
	// after a back-off.
	retry
	// redirected: 3xx. A redirect is never followed (a POST followed as a
	// GET arrives without its report); the report stays queued, is sent
	// again after a back-off, and a warning names the Location.
	redirected
	// unauthorized: the platform does not let the agent in (401, 403):
	// most often a token rotated since the agent read it. The report stays
	// at the head of the queue, as for retry; an agent with a token file
	// reads it again first, and if that gives a new token the report goes
	// again at once with it.
	unauthorized
)

// classify maps an HTTP status to an outcome.
func classify(status int) outcome {
	switch {
	case status >= 200 && status < 300:
		return delivered
	case status >= 300 && status < 400:
		return redirected
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return unauthorized
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests,
		status == http.StatusNotFound, status == http.StatusMethodNotAllowed:
		return retry
	case status >= 400 && status < 500:
		return refused
	default: // 5xx, 1xx
		return retry
	}
}

// refusalReasons are the reason words of the report protocol; a refusal
// whose body gives another word (or none) is counted under its status's
// word (refusalReason).
var refusalReasons = map[string]bool{
	"older": true, "duplicate": true, "invalid": true,
	"unauthorized": true, "too_large": true, "unknown_node": true,
}

// answer is the JSON body of the platform's answer, when it has one.
type answer struct {
	Error     string `json:"error"`
	Reason    string `json:"reason"`
	Duplicate bool   `json:"duplicate"`
}

// refusalReason is the reason a refused report is counted under: the
// body's, when it is one of the protocol's words, else the status's.
func refusalReason(status int, body string) string {
	if refusalReasons[body] {
		return body
	}
	switch status {
	case http.StatusConflict:
		return "older"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	default:
		return "invalid"
	}
}

// reply is what send learnt from one attempt.
type reply struct {
	out       outcome
	duplicate bool          // delivered, and the platform had it already
	reason    string        // a refusal's reason word
	detail    string        // status and the platform's text, or the error, for the log
	location  string        // a redirect's Location (userinfo redacted)
	after     time.Duration // the platform's Retry-After
	// unsent says the request never left the agent (no connection was
	// made), so the platform cannot have counted the report. Any other
	// failure may come after the platform counted it (see queued.sent).
	unsent bool
}

// reporter sends the queued reports to the platform, oldest first, one at
// a time, with a capped exponential back-off while the platform does not
// answer.
type reporter struct {
	node      string // the agent's node: a report of another was queued before -node changed
	url       string
	tok       *bearer
	userAgent string
	client    *http.Client
	q         *queue
	log       *slog.Logger
	m         *metrics
	dm        *deliveryMetrics
	retryMin  time.Duration
	retryMax  time.Duration
	wake      chan struct{}
	// rand spreads the back-off (see retryWait); nil means
	// math/rand/v2's Float64. Tests fix it.
	rand func() float64

	// The current outage, for the line that says delivery recovered:
	// failedAt is the first failed attempt since the queue was last
	// drained (zero: none), okAt the first delivery after the latest
	// failure, sent the reports delivered since failedAt.
	failedAt time.Time
	okAt     time.Time
	sent     int
}

// noID is the id enqueue returns for a report it could not queue at all.
const noID = ^uint64(0)

// enqueue stores a report, held back from sending until release(id).
// On a write error the report may still be queued, in memory: id is then
// its id, and noID when it is not queued at all.
func (r *reporter) enqueue(body []byte) (id uint64, err error) {
	id, dropped, err := r.q.pushHeld(body)
	if err != nil && !r.q.has(id) {
		id = noID
	}
	r.m.reportsDropped.WithLabelValues("overflow").Add(float64(len(dropped)))
	logOverflow(r.log, "report queue full; dropped the oldest reports", dropped, r.q.max)
	r.m.reportsQueued.Set(float64(r.q.len()))
	return id, err
}

// logOverflow logs the reports dropped on overflow as logDrops does.
// None of them reached the platform (see queue).
func logOverflow(log *slog.Logger, msg string, dropped []queued, max int) {
	var d drops
	for _, it := range dropped {
		d.add(it)
	}
	logDrops(log, msg, d, max)
}

// logDrops logs the reports dropped on overflow, one line per run,
// naming each by its seq; a run of more than maxSeqsListed gives its
// lowest and highest seq instead of every seq.
func logDrops(log *slog.Logger, msg string, d drops, max int) {
	for _, r := range d.runs {
		args := []any{"dropped", r.n, "queue_max", max, "reason", "overflow", "run", r.run}
		if r.n <= int64(len(r.seqs)) {
			args = append(args, "seqs", joinSeqs(r.seqs))
		} else {
			args = append(args, "seq_first", r.first, "seq_last", r.last)
		}
		log.Warn(msg, args...)
	}
	if d.otherN > 0 {
		log.Warn(msg, "dropped", d.otherN, "queue_max", max, "reason", "overflow", "runs", fmt.Sprintf("more than %d", maxRunsListed))
	}
}

// sumLength is the sum of the lines' lengths.
func sumLength(lines []badLine) (n int64) {
	for _, l := range lines {
		n += l.length
	}
	return n
}

// release lets the report id go, and wakes the sender.
func (r *reporter) release(id uint64) {
	r.q.release(id)
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// joinSeqs is "1,2,3".
func joinSeqs(seqs []uint64) string {
	var b strings.Builder
	for i, s := range seqs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(s, 10))
	}
	return b.String()
}

// run sends until ctx ends. A report in flight when ctx ends stays queued.
func (r *reporter) run(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		it, ok := r.q.begin()
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
		rep := r.send(ctx, it.body, token)
		r.q.end(it.id, !rep.unsent)
		if ctx.Err() != nil {
			return
		}
		if rep.out == unauthorized {
			r.dm.reportsRefused.WithLabelValues("unauthorized").Inc()
		}
		if rep.out == unauthorized && it.node != "" && it.node != r.node && r.tok.get() == token {
			// Queued before the node was renamed, and the token may
			// not report for the old name: it never will, so it must
			// not hold the new node's readings back.
			backoff = 0
			r.m.reportsDropped.WithLabelValues("renamed").Inc()
			r.log.Warn("platform refused a report queued under the node's old name; dropped it",
				"reason", "renamed", "answer", rep.detail, "queued_node", it.node, "node", r.node, "run", it.run, "seq", it.seq)
			r.remove(it)
			r.m.reportsQueued.Set(float64(r.q.len()))
			continue
		}
		if rep.out == unauthorized && r.newToken(token, rep.detail) {
			r.m.reportFailures.Inc()
			r.failed()
			backoff = 0
			continue
		}
		switch rep.out {
		case delivered:
			backoff = 0
			r.m.reportsSent.Inc()
			if rep.duplicate {
				r.dm.reportsDuplicate.Inc()
				r.log.Info("platform already had this report (a retry); taken as delivered",
					"run", it.run, "seq", it.seq)
			}
			r.remove(it)
			r.delivered()
		case refused:
			backoff = 0
			r.m.reportsDropped.WithLabelValues("rejected").Inc()
			r.dm.reportsRefused.WithLabelValues(rep.reason).Inc()
			r.log.Error("platform refused a report; dropped it", "reason", rep.reason,
				"answer", rep.detail, "run", it.run, "seq", it.seq)
			r.remove(it)
			r.delivered() // the platform answers again
		case retry, unauthorized, redirected:
			r.m.reportFailures.Inc()
			r.failed()
			backoff = nextBackoff(backoff, r.retryMin, r.retryMax)
			wait := retryWait(backoff, r.spread(), rep.after)
			args := []any{"reason", rep.detail, "queued", r.q.len(), "retry_in", wait.Round(time.Millisecond)}
			if rep.out == redirected {
				r.log.Warn("the report URL answers with a redirect, which the agent does not follow; fix the URL (report kept, will retry)",
					append(args, "location", rep.location)...)
			} else {
				r.log.Warn("report not delivered; will retry", args...)
			}
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

func (r *reporter) remove(it queued) {
	if err := r.q.remove(it.id); err != nil {
		r.log.Error("could not trim the report queue", "err", err)
	}
}

// failed notes a failed attempt.
func (r *reporter) failed() {
	if r.failedAt.IsZero() {
		r.failedAt = time.Now()
	}
	r.okAt = time.Time{}
}

// delivered notes an answer that took a report off the queue, and once
// the queue is empty after an outage says so in one line.
func (r *reporter) delivered() {
	if r.failedAt.IsZero() {
		return
	}
	if r.okAt.IsZero() {
		r.okAt = time.Now()
	}
	r.sent++
	if r.q.len() > 0 {
		return
	}
	outage := r.okAt.Sub(r.failedAt).Round(time.Second)
	r.log.Info(fmt.Sprintf("reports delivered again after %v; %d queued reports sent", outage, r.sent),
		"outage", outage, "sent", r.sent)
	r.failedAt, r.okAt, r.sent = time.Time{}, time.Time{}, 0
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

// spread is a number in [0, 1) from r.rand.
func (r *reporter) spread() float64 {
	if r.rand != nil {
		return r.rand()
	}
	return rand.Float64()
}

// send posts one report and says what the answer means.
func (r *reporter) send(ctx context.Context, body []byte, token string) reply {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return reply{out: retry, detail: redactErr(err), unsent: true}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if r.userAgent != "" {
		req.Header.Set("User-Agent", r.userAgent)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return reply{out: retry, detail: redactErr(err), unsent: unsent(err)}
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	msg = bytes.TrimSpace(msg)
	var ans answer
	_ = json.Unmarshal(msg, &ans) // a body that is not the protocol's JSON says nothing more
	rep := reply{out: classify(resp.StatusCode), detail: resp.Status}
	if len(msg) > 0 {
		rep.detail = fmt.Sprintf("%s: %s", resp.Status, strings.ToValidUTF8(string(msg[:min(len(msg), 512)]), "?"))
	}
	switch rep.out {
	case delivered:
		rep.duplicate = ans.Duplicate
	case refused:
		rep.reason = refusalReason(resp.StatusCode, ans.Reason)
		if rep.reason == "duplicate" { // counted before: delivered
			rep.out, rep.duplicate = delivered, true
		}
	case redirected:
		rep.location = RedactURL(resp.Header.Get("Location"))
		if rep.location == "" {
			rep.location = "(none given)"
		}
		rep.after = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	default:
		rep.after = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return rep
}

// unsent says whether err, from sending a request, means it never left
// the agent: the connection to the platform, or through the proxy, was not
// made (refused, no route, no such host, the dial's time-out).
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect")
}

// redactErr is err's text with the userinfo of any URL in it redacted
// (net/http's client errors quote the request's URL).
func redactErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		c := *ue
		c.URL = RedactURL(ue.URL)
		return c.Error()
	}
	return err.Error()
}

// retryAfter is how long a Retry-After header asks the agent to wait,
// at now: given in seconds ("120") or as an HTTP date ("Thu, 03 Dec 2026
// 09:30:00 GMT", or the two older forms net/http parses), 0 when it is
// missing, malformed or not in the future. retryWait bounds it.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return max(t.Sub(now), 0)
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

// retryWait is the wait before the next attempt, after a failed one whose
// back-off is backoff (nextBackoff: 1 s, 2 s, 4 s, … doubling to at most
// the interval): backoff spread over [0.8, 1.2) of itself by u, a number
// in [0, 1), so that nodes whose platform came back at the same moment do
// not all retry in step; or the platform's Retry-After (after) when that
// is later, at most maxRetryAfter.
func retryWait(backoff time.Duration, u float64, after time.Duration) time.Duration {
	wait := time.Duration(float64(backoff) * (0.8 + 0.4*u))
	if after > wait {
		wait = min(after, maxRetryAfter)
	}
	return wait
}
