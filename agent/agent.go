package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/sysctl"
)

// Source gives the agent its readings; *probe.Probe is one.
type Source interface {
	// Read takes one reading of the node now. Each reading must be newer
	// than the one before: the agent's tracker refuses one that is not
	// (counted as a reading error). Read should return promptly once ctx
	// ends.
	Read(ctx context.Context) (overload.Reading, error)
}

// Defaults for the zero fields of Config.
const (
	// DefaultInterval is the time between readings: "your agent reports
	// its load every 30 seconds".
	DefaultInterval = 30 * time.Second
	// DefaultQueueMax is how many reports wait while the platform does not
	// answer: one hour of readings at the default interval.
	DefaultQueueMax = 120
)

// Config configures an Agent. Zero fields take the documented defaults.
type Config struct {
	// Node names the node; empty means the host's name.
	Node string
	// Source takes the readings. Required.
	Source Source
	// Interval is the time between readings; 0 means DefaultInterval.
	Interval time.Duration
	// Limits are the overload limits; zero fields are overload's defaults.
	Limits overload.Limits

	// StateDir holds the tracker's state (state.json) and the report
	// queue (reports.jsonl). It is created if missing (mode 0700). Empty
	// means both live in memory only and a restart forgets them.
	//
	// An agent locks its state directory (flock(2) on agent.lock, which
	// holds its pid) from New until Close or its process's exit, so that
	// two agents never share one tracker's state: New fails with an error
	// wrapping ErrLocked while another agent holds it. Locking needs
	// Linux; elsewhere New fails for a StateDir with an error wrapping
	// errors.ErrUnsupported.
	StateDir string
	// QueueMax bounds the report queue, in readings; 0 means
	// DefaultQueueMax. When full, the oldest report is dropped (and
	// counted): the platform needs the latest state most.
	QueueMax int

	// ReportURL is where each reading is POSTed as JSON; empty means the
	// agent only probes, evaluates, logs and serves its handlers.
	ReportURL string
	// Token is sent as "Authorization: Bearer <Token>" with each report,
	// for as long as the agent runs. Give Token or TokenFile, not both.
	Token string
	// TokenFile names a file holding the token instead (its content
	// without the white space around it; one line, not empty), so that the
	// token can be rotated without a restart. New reads it and fails if it
	// cannot. The agent reads it again when the platform answers 401 or 403
	// (at most once an Interval), and when ReloadToken is called (which
	// proofkit-agent does on SIGHUP); a report refused with the old token
	// stays queued and goes again with the new one. A read that fails
	// keeps the token the agent has and logs a warning naming the file and
	// the reason, never the token.
	TokenFile string
	// UserAgent is sent with each report; empty means "proofkit-agent".
	UserAgent string
	// HTTPClient sends the reports; nil means a client with a 10 s
	// timeout per request and 5 s dial and TLS handshake timeouts.
	HTTPClient *http.Client
	// RetryMax caps the back-off between attempts while the platform does
	// not answer (it starts at 1 s and doubles); 0 means Interval.
	RetryMax time.Duration

	// Logger receives the agent's log; nil discards it.
	Logger *slog.Logger
}

// Agent is a node agent: it takes a reading every interval, evaluates it
// with an overload.Tracker, logs transitions and notices, persists its
// state, and reports each reading to the platform through an on-disk
// queue.
type Agent struct {
	node     string
	src      Source
	interval time.Duration
	limits   overload.Limits
	log      *slog.Logger
	reg      *prometheus.Registry
	m        *metrics
	rep      *reporter // nil when not reporting
	tok      *bearer   // the reports' token, fixed or from a file
	q        *queue
	state    string // path of state.json; empty when in memory

	mu      sync.Mutex // guards tracker, last
	tracker *overload.Tracker
	last    *overload.Reading

	saveMu sync.Mutex // serializes writes of state.json

	hist       history          // the last hour of readings, for / and the health handlers
	hmu        sync.Mutex       // guards saveErr, lastNotice, sysctl
	saveErr    error            // the latest Save's error
	lastNotice *overload.Notice // the latest notice of this process
	sysctl     *sysctl.Report   // the kernel sizing at start, if given

	lockMu sync.Mutex // guards lock
	lock   *os.File   // the state directory's lock; nil without one, or once closed
}

// New returns an agent ready to Run. It creates StateDir, locks it,
// checks that it can write there, and restores the tracker's state and
// the report queue a previous run left. Close releases the lock.
func New(cfg Config) (_ *Agent, err error) {
	if cfg.Source == nil {
		return nil, errors.New("new agent: no reading source")
	}
	if cfg.Interval < 0 || cfg.QueueMax < 0 || cfg.RetryMax < 0 {
		return nil, errors.New("new agent: negative interval, queue bound or retry cap")
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	if cfg.Token != "" && cfg.TokenFile != "" {
		return nil, errors.New("new agent: both Token and TokenFile given; give one")
	}
	a := &Agent{
		node:     cfg.Node,
		src:      cfg.Source,
		interval: cfg.Interval,
		limits:   cfg.Limits,
		log:      cfg.Logger,
	}
	if a.node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("new agent: no node name given and no hostname: %w", err)
		}
		a.node = h
	}
	if a.interval == 0 {
		a.interval = DefaultInterval
	}
	// Before the state directory is made or locked: a bad token file is
	// the caller's to fix, and leaves nothing behind.
	if a.tok, err = newBearer(cfg.Token, cfg.TokenFile, a.interval); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	if a.log == nil {
		a.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a.reg = prometheus.NewRegistry()
	if err := registerProcess(a.reg); err != nil {
		return nil, fmt.Errorf("new agent: register metrics: %w", err)
	}
	m, err := newMetrics(a.reg)
	if err != nil {
		return nil, fmt.Errorf("new agent: register metrics: %w", err)
	}
	a.m = m
	queueMax := cfg.QueueMax
	if queueMax == 0 {
		queueMax = DefaultQueueMax
	}

	var queuePath string
	if cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("new agent: state directory: %w", err)
		}
		// Lock before anything reads or writes there: restore may set a
		// bad state.json aside, which is not ours to do while another
		// agent runs on it.
		if a.lock, err = lockStateDir(cfg.StateDir); err != nil {
			return nil, fmt.Errorf("new agent: %w", err)
		}
		defer func() {
			if err != nil {
				a.Close()
			}
		}()
		if err := checkStateDir(cfg.StateDir); err != nil {
			return nil, fmt.Errorf("new agent: %w", err)
		}
		a.state = filepath.Join(cfg.StateDir, stateFile)
		queuePath = filepath.Join(cfg.StateDir, queueFile)
	}
	a.tracker = a.restore()

	q, torn, dropped, err := openQueue(queuePath, queueMax)
	if err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	a.q = q
	if torn > 0 {
		a.m.reportsDropped.WithLabelValues("torn").Add(float64(torn))
		a.log.Warn("report queue had lines cut by a crash; skipped them", "lines", torn, "path", queuePath)
	}
	if dropped > 0 {
		a.m.reportsDropped.WithLabelValues("overflow").Add(float64(dropped))
		a.log.Warn("report queue held more than its bound; dropped the oldest", "dropped", dropped, "queue_max", queueMax)
	}
	a.m.reportsQueued.Set(float64(q.len()))

	if cfg.ReportURL != "" {
		client := cfg.HTTPClient
		if client == nil {
			client = defaultClient()
		}
		retryMax := cfg.RetryMax
		if retryMax == 0 {
			retryMax = a.interval
		}
		ua := cfg.UserAgent
		if ua == "" {
			ua = "proofkit-agent"
		}
		a.rep = &reporter{
			url:       cfg.ReportURL,
			tok:       a.tok,
			userAgent: ua,
			client:    client,
			q:         q,
			log:       a.log,
			m:         a.m,
			retryMin:  min(time.Second, retryMax),
			retryMax:  retryMax,
			wake:      make(chan struct{}, 1),
		}
	} else if q.len() > 0 {
		a.log.Warn("reports are queued but no report URL is set; they stay queued", "queued", q.len())
	}
	return a, nil
}

func defaultClient() *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: 10 * time.Second,
			MaxIdleConns:          1,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		},
	}
}

// Node returns the name of the agent's node.
func (a *Agent) Node() string { return a.node }

// Run takes a reading at once and then every interval, and sends reports
// in the background, until ctx ends. It then writes the state a last time
// and returns nil; an error only when that write fails. Reports in flight
// or queued stay on disk for the next run.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if a.rep != nil {
		wg.Go(func() { a.rep.run(ctx) })
	}
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		_, _ = a.Step(ctx)
		select {
		case <-ctx.Done():
			wg.Wait()
			return a.Save()
		case <-t.C:
		}
	}
}

// Step takes one reading, evaluates it, logs what changed, saves the state
// and queues the reading as a report. Run calls it every interval; it is
// exported for callers that drive the agent themselves.
func (a *Agent) Step(ctx context.Context) (overload.Result, error) {
	r, err := a.src.Read(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return overload.Result{}, ctx.Err()
		}
		a.m.readingErrors.Inc()
		a.log.Error("reading failed", "err", err)
		return overload.Result{}, fmt.Errorf("take reading: %w", err)
	}
	r.Node = a.node
	if r.Version == 0 {
		r.Version = overload.ReadingVersion
	}

	a.mu.Lock()
	res, err := a.tracker.Observe(r)
	if err != nil {
		a.mu.Unlock()
		a.m.readingErrors.Inc()
		a.log.Error("reading not evaluated", "err", err)
		return overload.Result{}, fmt.Errorf("evaluate reading: %w", err)
	}
	a.last = &r
	since := a.tracker.Since()
	a.mu.Unlock()

	a.m.observeReading(r)
	a.m.overloaded.Set(b2f(res.Overloaded))
	if res.Overloaded {
		a.m.overloadedSince.Set(float64(since.Unix()))
	} else {
		a.m.overloadedSince.Set(0)
	}
	passed := make(map[overload.Check]bool)
	for _, f := range res.Passed {
		passed[f.Check] = true
	}
	holding := make(map[overload.Check]bool)
	for _, f := range res.Findings {
		holding[f.Check] = true
	}
	for _, c := range overload.Checks() {
		a.m.checkPassed.WithLabelValues(string(c)).Set(b2f(passed[c]))
		a.m.checkHolding.WithLabelValues(string(c)).Set(b2f(holding[c]))
	}
	a.logResult(r, res)

	saveErr := a.Save()
	a.noteStep(r, res, saveErr)
	if saveErr != nil {
		a.log.Error("could not save state", "err", saveErr)
	}
	if a.rep != nil {
		body, err := json.Marshal(r)
		if err == nil {
			err = a.rep.enqueue(body)
		}
		if err != nil {
			a.log.Error("could not queue report", "err", err)
		}
	}
	return res, nil
}

func (a *Agent) logResult(r overload.Reading, res overload.Result) {
	a.log.Debug("reading", "at", r.At, "memory_used_percent", r.MemoryUsedPercent,
		"load15", r.Load15, "cpus", r.CPUs, "conntrack_entries", r.ConntrackEntries,
		"conntrack_max", r.ConntrackMax, "conntrack_drops", r.ConntrackDrops,
		"listen_drops", r.ListenDrops, "missing", r.Missing, "overloaded", res.Overloaded)
	if e := res.Event; e != nil {
		switch e.Kind {
		case overload.Start:
			a.log.Warn("node overloaded", "node", a.node, "at", e.At, "findings", findingTexts(e.Findings))
		case overload.End:
			a.log.Info("overload ended", "node", a.node, "at", e.At, "lasted", e.Lasted.Round(time.Second))
		}
	}
	if n := res.Notice; n != nil {
		a.m.notices.Inc()
		a.log.Warn("overload notice", "node", a.node, "at", n.At, "notice", n.String())
	}
}

func findingTexts(fs []overload.Finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Text
	}
	return out
}
