package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
)

// NoticeID is a notice's message id: its node and the instant it was
// counted at (a node has at most one notice an instant, and one an hour),
// in microseconds, as the database keeps times.
func NoticeID(node string, at time.Time) string {
	return "ntc_" + node + "_" + strconv.FormatInt(at.UnixMicro(), 10)
}

// endID is the message id of the end of an overload.
func endID(node string, at time.Time) string {
	return "end_" + node + "_" + strconv.FormatInt(at.UnixMicro(), 10)
}

// Message is a Standard Webhooks payload.
type Message struct {
	Type      string      `json:"type"`
	Timestamp time.Time   `json:"timestamp"`
	Data      MessageData `json:"data"`
}

// MessageData is a message's data: the notice (or end) of one node.
type MessageData struct {
	// Node is the node the message is about; a test message, about
	// none, has no "node".
	Node string `json:"node,omitempty"`
	// At is the time of the reading, as the node dated it; Received is
	// when the platform received it, by its own clock, which dates the
	// overload.
	At       time.Time        `json:"at"`
	Received time.Time        `json:"received,omitzero"`
	Text     string           `json:"text,omitempty"`
	Lasted   string           `json:"lasted,omitempty"`
	Findings []messageFinding `json:"findings,omitempty"`
}

type messageFinding struct {
	Check   string             `json:"check"`
	Text    string             `json:"text"`
	Figures map[string]float64 `json:"figures"`
	Link    string             `json:"link,omitempty"`
}

// noticeDelivery is the outbox entry of notice n, decided at now. With
// no receiver for the node it is undeliverable from the start.
func noticeDelivery(n overload.Notice, seq int64, now time.Time, rs *Receivers) (store.Delivery, error) {
	m := Message{Type: store.TypeOverloaded, Timestamp: now.UTC(), Data: MessageData{
		Node: n.Node, At: n.At.UTC(), Received: now.UTC(), Text: n.Text, Findings: []messageFinding{},
	}}
	for _, f := range n.Findings {
		m.Data.Findings = append(m.Data.Findings, messageFinding{
			Check: string(f.Check), Text: f.Text, Link: f.Link,
			Figures: map[string]float64{"value": f.Value, "limit": f.Limit},
		})
	}
	return newDelivery(NoticeID(n.Node, n.At), n.Node, seq, m, now, rs)
}

// endDelivery is the outbox entry of the end of an overload.
func endDelivery(node string, seq int64, e overload.Event, now time.Time, rs *Receivers) (store.Delivery, error) {
	m := Message{Type: store.TypeOverloadEnded, Timestamp: now.UTC(), Data: MessageData{
		Node: node, At: e.At.UTC(), Received: now.UTC(), Lasted: e.Lasted.String(),
		Text: fmt.Sprintf("%s is no longer overloaded, after %v", node, e.Lasted.Round(time.Second)),
	}}
	return newDelivery(endID(node, e.At), node, seq, m, now, rs)
}

func newDelivery(id, node string, seq int64, m Message, now time.Time, rs *Receivers) (store.Delivery, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return store.Delivery{}, fmt.Errorf("node %s: message: %w: %w", node, store.ErrUnsaved, err)
	}
	d := store.Delivery{ID: id, Node: node, Type: m.Type, At: m.Data.At, Seq: seq, Body: body, Created: now, Status: store.StatusPending, NextAt: now}
	// A node of an operator's waits for its attempt, which reads the
	// operator's receiver as the store has it then: one set through
	// another replica may not be in force here yet.
	if rs.ForNode(node) == nil && rs.owner(node) == "" {
		d.Status, d.LastError, d.NextAt = store.StatusUndeliverable, "no receiver for the node in the notify file", time.Time{}
	}
	return d, nil
}

// sign is the webhook-signature header of a message: "v1," and the
// base64 of HMAC-SHA256 of "id.timestamp.body" under each secret, space
// separated.
func sign(secrets [][]byte, id string, ts int64, body []byte) string {
	var b strings.Builder
	for i, key := range secrets {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write(strconv.AppendInt(nil, ts, 10))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return b.String()
}

// classify says what an answer with status code means.
func classifyStatus(code int) store.Outcome {
	switch {
	case code >= 200 && code < 300:
		return store.OutcomeDelivered
	case code == http.StatusGone:
		return store.OutcomeGone
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		return store.OutcomeRetry
	default: // other 4xx; 1xx and 3xx (redirects are not followed)
		return store.OutcomeFailed
	}
}

// Config configures delivery; zero fields are the defaults.
type Config struct {
	// File is the notify file ("" for none: every notice undeliverable).
	File string
	// GiveUp is how long a delivery is retried (24 h).
	GiveUp time.Duration
	// Ended also sends node.overload_ended messages.
	Ended bool
	// Timeout bounds one attempt (15 s).
	Timeout time.Duration
	// PublicOnly sends operators' own receivers (set through the API)
	// messages only at public addresses: a connection to a loopback,
	// private, link-local, shared (100.64.0.0/10), multicast or
	// unspecified address is refused as it is made, whatever name led
	// to it, so an operator cannot make the platform call its own
	// network. The notify file's receivers are the platform's own and
	// may be anywhere.
	PublicOnly bool

	// The back-off schedule (Backoff: from 10 s, doubling, at most an
	// hour), the poll interval (1 s), and the lease a claim takes (twice
	// Timeout and 5 s): tests shorten them.
	BackoffBase, BackoffMax time.Duration
	Poll, Lease             time.Duration

	maxInFlight, perReceiver int
}

// The defaults of Config's fields, and how many attempts run at once,
// in all (DefaultMaxInFlight) and to one receiver (DefaultPerReceiver).
const (
	DefaultGiveUp      = 24 * time.Hour
	DefaultTimeout     = 15 * time.Second
	defaultBackoffBase = 10 * time.Second
	defaultBackoffMax  = time.Hour
	defaultPoll        = time.Second
	DefaultMaxInFlight = 32
	DefaultPerReceiver = 4
)

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.GiveUp, DefaultGiveUp)
	def(&c.Timeout, DefaultTimeout)
	def(&c.BackoffBase, defaultBackoffBase)
	def(&c.BackoffMax, defaultBackoffMax)
	def(&c.Poll, defaultPoll)
	// A lease outlasts an attempt, so a delivery is claimed again only
	// once its replica is surely gone.
	def(&c.Lease, 2*c.Timeout+5*time.Second)
	if c.maxInFlight <= 0 {
		c.maxInFlight = DefaultMaxInFlight
	}
	if c.perReceiver <= 0 {
		c.perReceiver = DefaultPerReceiver
	}
	return c
}

// Backoff is the wait after the n-th failed attempt: base doubled for
// each attempt before it, at most max, with equal jitter (between half
// and all of it), so replicas retrying many deliveries spread out.
func Backoff(base, max time.Duration, n int, r float64) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + time.Duration(r*float64(d/2))
}

// Dispatch is what a store and the notifier share: the receivers in
// force (a notice decided for a node without one goes into the outbox
// undeliverable), whether ends of overloads are sent, and the wake-up a
// store gives the notifier when it wrote a delivery. It is made first;
// the store is opened with it, and the notifier with it and the store's
// outbox.
type Dispatch struct {
	ended bool
	rcv   atomic.Pointer[Receivers]
	wake  chan struct{}

	mu     sync.Mutex // orders the changes of rcv
	ops    map[string]store.OperatorReceiver
	owners map[string]string
	at     time.Time // when ops were put in
}

// NewDispatch is the dispatch of a notify file's receivers rs (nil: none).
func NewDispatch(cfg Config, rs *Receivers) *Dispatch {
	d := &Dispatch{ended: cfg.Ended, wake: make(chan struct{}, 1)}
	if rs == nil {
		rs = &Receivers{byNode: map[string]*Receiver{}}
	}
	d.rcv.Store(withOperators(rs, nil, nil, time.Time{}))
	return d
}

// SetOperators puts the operators' own receivers ops in force beside the
// notify file's, for the nodes owners gives each, as at now.
func (d *Dispatch) SetOperators(ops map[string]store.OperatorReceiver, owners map[string]string, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ops, d.owners, d.at = ops, owners, now
	d.rcv.Store(withOperators(d.rcv.Load().file, ops, owners, now))
}

// setFile puts a notify file's receivers in force, beside the operators'
// own, and returns the file's before.
func (d *Dispatch) setFile(rs *Receivers) *Receivers {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.rcv.Load().file
	d.rcv.Store(withOperators(rs, d.ops, d.owners, d.at))
	return old
}

// Receivers is the notify file in force; nil without a dispatch.
func (d *Dispatch) Receivers() *Receivers {
	if d == nil {
		return nil
	}
	return d.rcv.Load()
}

// NoticeDelivery is the outbox's delivery of notice n, decided at at as
// the node's seq-th reading, to the receiver in force for its node
// (store.Deliveries).
func (d *Dispatch) NoticeDelivery(n overload.Notice, seq int64, at time.Time) (store.Delivery, error) {
	return noticeDelivery(n, seq, at, d.Receivers())
}

// EndDelivery is the outbox's delivery of the end e of node's overload;
// false when ends are not sent (store.Deliveries).
func (d *Dispatch) EndDelivery(node string, seq int64, e overload.Event, at time.Time) (store.Delivery, bool, error) {
	if !d.ended {
		return store.Delivery{}, false, nil
	}
	dl, err := endDelivery(node, seq, e, at, d.Receivers())
	return dl, true, err
}

// Poke wakes the workers: a delivery was written.
func (d *Dispatch) Poke() {
	if d == nil {
		return
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Notifier delivers the outbox: on every replica, it claims due
// deliveries and sends each to its node's receiver, a few at a time per
// receiver so one slow receiver does not hold back the others.
type Notifier struct {
	*Dispatch
	cfg    Config
	box    store.OutboxStore
	log    *slog.Logger
	now    func() time.Time
	client *http.Client
	public *http.Client // operators' receivers with PublicOnly

	mu       sync.Mutex
	inFlight map[string]int      // by receiver URL
	failing  map[string]bool     // by receiver URL: its last attempt is to be retried
	total    int                 // attempts in flight
	disabled map[string][32]byte // receiver URL → the notify file's hash when it answered 410
	attempts [len(store.OutcomeNames)]atomic.Int64
	claimed  atomic.Int64 // deliveries claimed, for tests
	running  sync.WaitGroup
	// Attempted, when set, is told of each attempt to an operator's own
	// receiver, whether it delivered (fleet.Attempted).
	Attempted func(ctx context.Context, rc *Receiver, ok bool, at time.Time)
	// ReadOperator, when set, reads an operator's receiver as the store
	// holds it now (store.ReceiverStore's OperatorReceiver). An attempt
	// for an operator's node takes the receiver from it, so one set,
	// moved, rotated, disabled or enabled through another replica is in
	// force at once, not at this replica's next plan round.
	ReadOperator func(ctx context.Context, operator string) (store.OperatorReceiver, bool, error)
}

// New is the notifier of d's receivers, delivering box (a
// store's outbox; nil: none, for a platform that only reloads its file).
func New(cfg Config, d *Dispatch, box store.OutboxStore, log *slog.Logger, now func() time.Time) *Notifier {
	cfg = cfg.withDefaults()
	if now == nil {
		now = func() time.Time { return time.Now().Round(0) }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{
		Dispatch: d, cfg: cfg, box: box, log: log, now: now,
		inFlight: map[string]int{}, failing: map[string]bool{}, disabled: map[string][32]byte{},
		client: &http.Client{
			Timeout: cfg.Timeout,
			// A receiver's redirect is not followed: the signed body goes
			// only where the operator's file says.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	if cfg.PublicOnly {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil // a proxy's address would pass the check for the receiver's
		t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: refuseNonPublic}).DialContext
		c := *n.client
		c.Transport = t
		n.public = &c
	}
	return n
}

// shared is 100.64.0.0/10, the carrier-grade NAT's range (RFC 6598).
var shared = netip.MustParsePrefix("100.64.0.0/10")

// refuseNonPublic is PublicOnly's check, on the address a connection is
// about to be made to.
func refuseNonPublic(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	ip = ip.Unmap()
	if !ip.IsGlobalUnicast() || ip.IsPrivate() || shared.Contains(ip) || ip.Is4() && ip.As4()[0] == 0 {
		return fmt.Errorf("%v is not a public address: an operator's receiver must be public (-notify-public-only)", ip)
	}
	return nil
}

// Reload reads the notify file again; a file that does not parse is
// refused and the one in force kept.
func (n *Notifier) Reload() error {
	if n.cfg.File == "" {
		return nil
	}
	rs, err := ReadReceivers(n.cfg.File)
	if err != nil {
		return fmt.Errorf("-notify-file: %w (the previous file stays in force)", err)
	}
	old := n.setFile(rs)
	if old.sum != rs.sum {
		n.mu.Lock()
		clear(n.disabled) // a receiver that answered 410 is tried again
		n.mu.Unlock()
	}
	n.log.Info("notify file reloaded", "file", n.cfg.File, "receivers", len(rs.byNode), "any", rs.any != nil)
	n.Poke()
	return nil
}

// Run claims and delivers until ctx ends, then waits for the attempts in
// flight (each bounded by the timeout).
func (n *Notifier) Run(ctx context.Context) {
	t := time.NewTicker(n.cfg.Poll)
	defer t.Stop()
	defer n.running.Wait()
	for {
		n.pump(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.wake:
		}
	}
}

// Fairness between receivers. Each receiver has its own share of the
// attempts in flight: cfg.perReceiver while it answers, one while it
// fails (its last attempt timed out, was refused or answered 408, 429 or
// 5xx), so a receiver that hangs holds one slot, not a share of them.
// The replica's cfg.maxInFlight bounds the attempts beyond each
// receiver's first: a receiver with nothing in flight may always start
// one, so receivers that hang, however many, never hold back another's
// messages. A claim skips every receiver that may start no attempt now,
// so the oldest messages of a busy receiver never take the place of a
// newer one of an idle receiver.

// limitOf is how many attempts the receiver with key may have in flight;
// n.mu held.
func (n *Notifier) limitOf(key string) int {
	if n.failing[key] {
		return 1
	}
	return n.cfg.perReceiver
}

// busyLocked reports whether the receiver with key may start no attempt
// now; n.mu held.
func (n *Notifier) busyLocked(key string) bool {
	in := n.inFlight[key]
	return in >= n.limitOf(key) || (in > 0 && n.total >= n.cfg.maxInFlight)
}

// filter is the claim filter for the receivers now busy, and how many
// deliveries a claim may take: the free slots, or, with none free, one
// for each receiver with nothing in flight. A node's receiver is its
// operator's own, else its line's, else the "*" line's (ForNode). Own,
// read only while the "*" receiver is busy, is sent only then.
func (n *Notifier) filter(rs *Receivers) (store.ClaimFilter, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var f store.ClaimFilter
	idle := map[string]bool{} // receivers with nothing in flight, by URL
	// mark puts nodes, whose receiver is the one with key, among the
	// busy when it is busy, and counts it idle when nothing is in flight.
	mark := func(key string, nodes ...string) {
		if n.busyLocked(key) {
			f.Busy = append(f.Busy, nodes...)
		} else if n.inFlight[key] == 0 {
			idle[key] = true
		}
	}
	if rs.any != nil {
		key := rs.any.URL.String()
		f.AnyBusy = n.busyLocked(key)
		mark(key)
	}
	for node, rc := range rs.byNode {
		if rs.byOperator[rs.owners[node]] != nil {
			continue // its operator's own receiver takes the line's place
		}
		if f.AnyBusy {
			f.Own = append(f.Own, node)
		}
		mark(rc.URL.String(), node)
	}
	for op, rc := range rs.byOperator {
		nodes := rs.opNodes[op]
		if f.AnyBusy {
			f.Own = append(f.Own, nodes...)
		}
		if !rc.disabled { // a disabled one's are settled at once, without an attempt
			mark(rc.URL.String(), nodes...)
		}
	}
	// The longest wait an attempt schedules: a back-off, or a
	// Retry-After, capped at BackoffMax; a release's second.
	f.Lead = max(n.cfg.BackoffMax, time.Second)
	free := n.cfg.maxInFlight - n.total
	if free <= 0 {
		free = len(idle)
	}
	return f, free
}

// pump claims what is due, as many as there are free slots, and starts
// an attempt of each.
func (n *Notifier) pump(ctx context.Context) {
	for ctx.Err() == nil {
		rs := n.Receivers()
		f, free := n.filter(rs)
		if free <= 0 {
			return
		}
		qctx, cancel := context.WithTimeout(ctx, storeTimeout)
		ds, err := n.box.Claim(qctx, n.now(), free, n.cfg.Lease, f)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				n.log.Warn("notify: claiming deliveries", "err", err)
			}
			return
		}
		n.claimed.Add(int64(len(ds)))
		for _, d := range ds {
			n.start(ctx, rs, d)
		}
		if len(ds) < free {
			return
		}
	}
}

// Outbox is the outbox n delivers; nil for a nil n or none.
func (n *Notifier) Outbox() store.OutboxStore {
	if n == nil {
		return nil
	}
	return n.box
}

// SendsEnds reports whether the ends of overloads are sent.
func (d *Dispatch) SendsEnds() bool { return d.ended }

// PumpOnce claims what is due at the notifier's clock once, as Run
// does, and waits for the attempts it started; it returns how many
// deliveries it claimed. It is for a caller that drives the notifier on
// its own clock (a test) instead of run.
func (n *Notifier) PumpOnce(ctx context.Context) int64 {
	before := n.claimed.Load()
	n.pump(ctx)
	n.running.Wait()
	return n.claimed.Load() - before
}

// AttemptsInFlight is how many attempts are in flight.
func (n *Notifier) AttemptsInFlight() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.total
}

// start begins an attempt of d, or settles it at once when its receiver
// is gone, disabled, or has too many attempts in flight (then it is due
// again in a moment).
func (n *Notifier) start(ctx context.Context, rs *Receivers, d store.Delivery) {
	now := n.now()
	rc, err := n.receiverFor(ctx, rs, d.Node, now)
	if err != nil {
		n.log.Warn("notify: receiver not read", "id", d.ID, "node", d.Node, "err", err)
		n.settle(ctx, d, nil, store.AttemptResult{Outcome: store.OutcomeRelease, At: now, Next: now.Add(time.Second)})
		return
	}
	if rc == nil {
		n.settle(ctx, d, nil, store.AttemptResult{Outcome: store.OutcomeUndeliverable, At: now, Err: "no receiver for the node: none in the notify file, or its operator's is disabled"})
		return
	}
	key := rc.URL.String()
	n.mu.Lock()
	sum, off := n.disabled[key]
	busy := n.busyLocked(key)
	if !off && !busy {
		n.inFlight[key]++
		n.total++
	}
	n.mu.Unlock()
	switch {
	case off && sum == rs.sum:
		n.settle(ctx, d, rc, store.AttemptResult{Outcome: store.OutcomeFailed, At: now, Status: http.StatusGone,
			Err: "the receiver answered 410 Gone: disabled until the notify file changes"})
		return
	case off: // the file changed since: try again
		n.mu.Lock()
		delete(n.disabled, key)
		n.mu.Unlock()
		n.start(ctx, rs, d)
		return
	case busy:
		// Due again at once: the claims skip a busy receiver's nodes
		// until one of its attempts ends.
		n.settle(ctx, d, rc, store.AttemptResult{Outcome: store.OutcomeRelease, At: now, Next: now})
		return
	}
	n.running.Add(1)
	go func() {
		defer n.running.Done()
		res := n.Attempt(ctx, rc, d)
		n.mu.Lock()
		n.inFlight[key]--
		n.total--
		switch res.Outcome {
		case store.OutcomeGone:
			n.disabled[key] = rs.sum
		case store.OutcomeRetry:
			n.failing[key] = true
		default: // it answered
			delete(n.failing, key)
		}
		n.mu.Unlock()
		n.settle(context.WithoutCancel(ctx), d, rc, res)
		n.Poke() // a slot is free
	}()
}

// Attempt sends d to rc once.
func (n *Notifier) Attempt(ctx context.Context, rc *Receiver, d store.Delivery) store.AttemptResult {
	now := n.now()
	res := store.AttemptResult{At: now}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rc.URL.String(), bytes.NewReader(d.Body))
	if err != nil {
		res.Outcome, res.Err = store.OutcomeFailed, "request: "+urlless(err)
		return res
	}
	ts := now.Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "nodekit-platform")
	req.Header.Set("webhook-id", d.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sign(rc.Secrets, d.ID, ts, d.Body))
	client := n.client
	if rc.Operator != "" && n.public != nil {
		client = n.public
	}
	resp, err := client.Do(req)
	if err != nil && parent.Err() != nil {
		// The platform stops (SIGTERM): not the receiver's failure, and
		// no reason for a back-off. Due again at once, for another
		// replica or this one restarted.
		res.Outcome, res.Err, res.Next = store.OutcomeRetry, "the platform stopped during the attempt", n.now()
		return res
	}
	if err != nil {
		res.Outcome, res.Err = store.OutcomeRetry, urlless(err)
	} else {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		res.Status = resp.StatusCode
		res.Outcome = classifyStatus(resp.StatusCode)
		if res.Outcome != store.OutcomeDelivered {
			res.Err = resp.Status
		}
	}
	if res.Outcome == store.OutcomeRetry {
		if now.Sub(d.Created) >= n.cfg.GiveUp {
			res.Outcome = store.OutcomeFailed
			res.Err = fmt.Sprintf("given up after %d attempts over %v: %s", d.Attempts, n.cfg.GiveUp, res.Err)
		} else {
			wait := Backoff(n.cfg.BackoffBase, n.cfg.BackoffMax, d.Attempts, rand.Float64())
			if ra := retryAfter(resp, now); ra > wait {
				wait = min(ra, n.cfg.BackoffMax)
			}
			res.Next = now.Add(wait)
		}
	}
	return res
}

// retryAfter is how long an answer's Retry-After asks to wait from now,
// given in seconds or as an HTTP date (RFC 9110, 10.2.3); 0 for none or
// a value that is neither.
func retryAfter(resp *http.Response, now time.Time) time.Duration {
	if resp == nil {
		return 0
	}
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if s, err := strconv.Atoi(v); err == nil {
		return time.Duration(max(s, 0)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// urlless is err without the URL an *url.Error carries, which may hold
// userinfo or a token: a log line names the receiver by host alone.
func urlless(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return err.Error()
}

// settle records res and logs a failure, naming the receiver's host.
func (n *Notifier) settle(ctx context.Context, d store.Delivery, rc *Receiver, res store.AttemptResult) {
	n.attempts[res.Outcome].Add(1)
	host := ""
	if rc != nil {
		host = rc.Host()
	}
	switch res.Outcome {
	case store.OutcomeRetry:
		n.log.Warn("notify: delivery failed, will retry", "id", d.ID, "node", d.Node, "receiver", host,
			"attempt", d.Attempts, "status", res.Status, "err", res.Err, "next", res.Next)
	case store.OutcomeFailed, store.OutcomeGone:
		n.log.Error("notify: delivery failed", "id", d.ID, "node", d.Node, "receiver", host,
			"attempt", d.Attempts, "status", res.Status, "err", res.Err)
	case store.OutcomeUndeliverable:
		n.log.Warn("notify: undeliverable", "id", d.ID, "node", d.Node, "err", res.Err)
	}
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if rc != nil && rc.Operator != "" && n.Attempted != nil && res.Outcome <= store.OutcomeGone {
		n.Attempted(sctx, rc, res.Outcome == store.OutcomeDelivered, res.At)
	}
	if err := n.box.Settle(sctx, d, res); err != nil {
		// The lease runs out and another attempt is made: at least once.
		n.log.Warn("notify: recording a delivery", "id", d.ID, "err", err)
	}
}

// receiverFor is node's receiver for an attempt at now: its operator's
// own as the store holds it now (ReadOperator), unless it has none or
// cannot be sent to, then the notify file's; nil when there is none or
// the operator's is disabled.
func (n *Notifier) receiverFor(ctx context.Context, rs *Receivers, node string, now time.Time) (*Receiver, error) {
	op := rs.owner(node)
	if op == "" || n.ReadOperator == nil {
		return rs.ForNode(node), nil
	}
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	r, ok, err := n.ReadOperator(sctx, op)
	if err != nil {
		return nil, fmt.Errorf("receiver of operator %s: %w", op, err)
	}
	if rc := operatorReceiver(op, r, now); ok && rc != nil {
		if rc.disabled {
			return nil, nil
		}
		return rc, nil
	}
	return rs.file.ForNode(node), nil
}

// storeTimeout bounds each of the notifier's calls to its outbox, as
// a request's deadline bounds the API's.
const storeTimeout = 10 * time.Second

// LogUnreached logs the receivers in force, and which of the nodes
// nodeIDs lists have none: their notices are kept, and marked
// undeliverable.
func (n *Notifier) LogUnreached(ctx context.Context, log *slog.Logger, nodeIDs func(context.Context) ([]string, error)) {
	rs := n.Receivers()
	if n.cfg.File == "" && len(rs.byOperator) == 0 {
		log.Warn("notify: no -notify-file and no operator's receiver: notices are kept, marked undeliverable, and sent to nobody")
		return
	}
	if rs.any != nil {
		log.Info("notify: receivers", "file", n.cfg.File, "nodes", len(rs.byNode), "any", rs.any.Host())
		return
	}
	qctx, cancel := context.WithTimeout(ctx, storeTimeout)
	ids, err := nodeIDs(qctx)
	cancel()
	if err != nil {
		log.Warn("notify: listing nodes", "err", err)
	}
	var none []string
	for _, id := range ids {
		if rs.ForNode(id) == nil {
			none = append(none, id)
		}
	}
	log.Info("notify: receivers", "file", n.cfg.File, "nodes", len(rs.byNode), "operators", len(rs.byOperator))
	if len(none) > 0 {
		log.Warn("notify: nodes without a receiver (no operator's own, no line of their own, no * line): their notices are kept, marked undeliverable",
			"count", len(none), "nodes", strings.Join(none[:min(len(none), 20)], " "))
	}
}
