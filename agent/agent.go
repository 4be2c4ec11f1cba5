package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proofkit/nodekit/internal/buildinfo"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/overload/probe"
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

// A LinkByteSource is a Source that also gives, with each reading, the
// bytes each link moved since the previous reading as the kernel counts
// them; *probe.Probe is one. The agent's byte counters
// (proofkit_agent_network_receive_bytes_total and …_transmit_…) then add
// exactly the kernel's counts, whatever the wall clock does. From a
// Source without ReadLinkBytes they add each link's rate times the
// monotonic time since the previous reading, which is the same give or
// take the time a reading takes.
type LinkByteSource interface {
	Source
	// ReadLinkBytes takes one reading, as Read does, with the bytes each
	// link in its Links moved since the previous reading.
	ReadLinkBytes(ctx context.Context) (overload.Reading, []probe.LinkBytes, error)
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
	// Node names the node; empty means the host's name. An agent that
	// reports needs a name the platform takes (see overload.CheckNode): New refuses
	// another, the host's name too. Reports queued under an earlier name
	// go under that name, or are dropped where the platform refuses them
	// (see the package documentation).
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
	// counted): the platform needs the latest state most. The oldest is
	// kept if the platform may have counted it (sent, with no answer that
	// settles it), and the next oldest goes; with a QueueMax of 1 the
	// queue then holds two.
	QueueMax int

	// ReportURL is where each reading is POSTed as JSON; empty means the
	// agent only probes, evaluates, logs and serves its handlers. New
	// refuses one that is not http:// or https:// with a host, or that
	// holds a fragment, white space or bytes that are not UTF-8. A user
	// and password in it are never sent (the agent sends its bearer token)
	// and are redacted wherever the URL is logged (RedactURL); New warns
	// of them, and of a token sent over plain http:// to a host that is
	// not loopback.
	ReportURL string
	// Token is sent as "Authorization: Bearer <Token>" with each report,
	// for as long as the agent runs: printable ASCII without spaces, and
	// without the "Bearer " (New refuses another). Give Token or
	// TokenFile, not both.
	Token string
	// TokenFile names a file holding the token instead (its content
	// without the white space around it; one line, as Token), so that the
	// token can be rotated without a restart. New reads it and fails if it
	// cannot. The agent reads it again when the platform answers 401 or 403
	// (at most once an Interval), and when ReloadToken is called (which
	// proofkit-agent does on SIGHUP); a report refused with the old token
	// stays queued and goes again with the new one. A read that fails
	// keeps the token the agent has and logs a warning naming the file and
	// the reason, never the token.
	TokenFile string
	// ReportCA names a PEM file of CA certificates: the report URL's
	// server certificate is then checked against those only, not the
	// system's, for a platform with its own CA. It needs an https://
	// ReportURL and no HTTPClient (whose transport sets its own roots).
	// New reads it once, as it reads a token file (a regular file, here
	// of at most 1 MiB).
	ReportCA string
	// UserAgent is sent with each report; empty means
	// "proofkit-agent/<version>" ("proofkit-agent/v0.5.0"; see -version
	// for the commit and Go version).
	UserAgent string
	// HTTPClient sends the reports; nil means a client with a 10 s
	// timeout per request and 5 s dial and TLS handshake timeouts. The
	// agent uses a copy whose CheckRedirect never follows a redirect: a
	// 3xx leaves the report queued and is retried with a warning naming
	// its Location.
	HTTPClient *http.Client
	// RetryMax caps the back-off between attempts while the platform does
	// not answer (it starts at 1 s and doubles); 0 means Interval. Each
	// wait is the back-off spread over 0.8–1.2 times itself, or the
	// platform's Retry-After (seconds or an HTTP date) when that is later,
	// at most 10 minutes.
	RetryMax time.Duration

	// Now is the wall clock: a saved state whose latest reading is more
	// than a minute ahead of it is from the future (the clock was wrong,
	// then corrected) and the agent starts afresh, in a new run; a reading
	// whose source gave no At is dated by it. nil means time.Now. The
	// readings' own times come from the Source.
	Now func() time.Time

	// Logger receives the agent's log; nil discards it.
	Logger *slog.Logger

	// LogLinesDropped, if set, says how many lines Logger's output has
	// dropped rather than wait for (a buffered writer in front of a
	// stderr that does not keep up); /metrics serves it as
	// proofkit_agent_log_lines_dropped_total. Nil serves no such series.
	LogLinesDropped func() int64
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

	dm      *deliveryMetrics
	reading chan struct{} // holds a token while the source's Read runs
	now     func() time.Time
	// stepTimeout bounds each Step that Run takes (see Run).
	stepTimeout time.Duration

	mu      sync.Mutex // guards tracker, last, run, seq, lastAt, lastMono, runOnDisk
	tracker *overload.Tracker
	last    *overload.Reading
	// run and seq are the wire format's run id and the seq of the latest
	// reading taken (0 before the first of the run); lastAt is that
	// reading's at, and lastMono the monotonic instant it was taken in
	// this process (zero after a restart).
	run      string
	seq      uint64
	lastAt   time.Time
	lastMono time.Time
	// runOnDisk says state.json holds run (restored with it, or saved
	// since it began), so a restart would go on with it.
	runOnDisk bool

	saveMu sync.Mutex // serializes writes of state.json

	hist       history          // the last hour of readings, for / and the health handlers
	hmu        sync.Mutex       // guards saveErr, lastNotice, sysctl, started
	started    time.Time        // when Run started; zero before
	saveErr    error            // the latest Save's error
	lastNotice *overload.Notice // the latest notice of this process
	sysctl     *sysctl.Report   // the kernel sizing at start, if given

	miss missingInputs // what the log said of inputs not measured
	// stateTaken is set once another agent holds the state directory
	// (see holdStateDir).
	stateTaken atomic.Pointer[error]

	lockMu sync.Mutex // guards lock
	lock   *os.File   // the state directory's lock; nil without one, or once closed
}

// New returns an agent ready to Run. It creates StateDir, locks it,
// checks that it can write there, and restores the tracker's state and
// the report queue a previous run left. Close releases the lock.
func New(cfg Config) (_ *Agent, err error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	a := &Agent{
		src:      cfg.Source,
		interval: cmp.Or(cfg.Interval, DefaultInterval),
		limits:   cfg.Limits,
		log:      cmp.Or(cfg.Logger, discardLogger),
		reading:  make(chan struct{}, 1),
		now:      cfg.Now,
	}
	a.stepTimeout = max(a.interval, minStepTimeout)
	if a.now == nil {
		a.now = time.Now
	}
	if a.node, err = nodeName(cfg.Node); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	if err := checkNode(cfg, a.node); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	client, err := reportClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	// Before the state directory is made or locked: a bad token file is
	// the caller's to fix, and leaves nothing behind.
	if a.tok, err = newBearer(cfg.Token, cfg.TokenFile, a.interval); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	warnCredentials(a.log, cfg)
	if a.reg, err = registry(); err != nil {
		return nil, fmt.Errorf("new agent: register metrics: %w", err)
	}
	if a.m, err = newMetrics(a.reg); err != nil {
		return nil, fmt.Errorf("new agent: register metrics: %w", err)
	}
	if a.dm, err = newDeliveryMetrics(a.reg); err != nil {
		return nil, fmt.Errorf("new agent: register metrics: %w", err)
	}
	if f := cfg.LogLinesDropped; f != nil {
		if err = a.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "proofkit_agent_log_lines_dropped_total",
			Help: "Log lines dropped because the log's output (stderr) stalled; the agent waits for it at most a moment.",
		}, func() float64 { return float64(f()) })); err != nil {
			return nil, fmt.Errorf("new agent: register metrics: %w", err)
		}
	}

	var queuePath string
	if cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("new agent: %w", &StateDirError{Dir: cfg.StateDir, Err: err})
		}
		// Lock before anything reads or writes there: restore may set a
		// bad state.json aside, which is not ours to do while another
		// agent runs on it.
		if a.lock, err = lockStateDir(cfg.StateDir); err != nil {
			return nil, fmt.Errorf("new agent: %w", &StateDirError{Dir: cfg.StateDir, Err: err})
		}
		defer func() {
			if err != nil {
				a.Close()
			}
		}()
		if err := checkStateDir(cfg.StateDir); err != nil {
			return nil, fmt.Errorf("new agent: %w", &StateDirError{Dir: cfg.StateDir, Err: err})
		}
		a.state = filepath.Join(cfg.StateDir, stateFile)
		queuePath = filepath.Join(cfg.StateDir, queueFile)
	}
	a.tracker = a.restore()
	if a.q, err = a.openQueue(queuePath, cmp.Or(cfg.QueueMax, DefaultQueueMax)); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	if cfg.ReportURL != "" {
		a.rep = a.newReporter(cfg, client)
	} else if a.q.len() > 0 {
		a.log.Warn("reports are queued but no report URL is set; they stay queued", "queued", a.q.len())
	}
	return a, nil
}

// check says which field of cfg is wrong, one error per field; a field
// with a bad value is a *ConfigError.
func (cfg Config) check() error {
	switch {
	case cfg.Source == nil:
		return errors.New("no reading source (Config.Source)")
	case cfg.Interval < 0:
		return &ConfigError{Field: "Interval", Value: cfg.Interval.String(), Want: "is negative; want 0 (the default, 30s) or more"}
	case cfg.QueueMax < 0:
		return &ConfigError{Field: "QueueMax", Value: strconv.Itoa(cfg.QueueMax), Want: "is negative; want 0 (the default, 120) or more"}
	case cfg.RetryMax < 0:
		return &ConfigError{Field: "RetryMax", Value: cfg.RetryMax.String(), Want: "is negative; want 0 (the interval) or more"}
	case cfg.Token != "" && cfg.TokenFile != "":
		return errors.New("both Token and TokenFile given; give one")
	case cfg.ReportCA != "" && cfg.HTTPClient != nil:
		return errors.New("both ReportCA and HTTPClient given; give one (an HTTPClient's transport sets its own roots)")
	}
	if cfg.Token != "" {
		if err := checkToken(cfg.Token); err != nil {
			return &ConfigError{Field: "Token", Value: "(not shown)", Want: err.Error()}
		}
	}
	if cfg.ReportURL != "" {
		if err := checkReportURL(cfg.ReportURL); err != nil {
			return err
		}
	}
	if cfg.ReportCA != "" {
		if u, err := url.Parse(cfg.ReportURL); err != nil || u.Scheme != "https" {
			return &ConfigError{Field: "ReportCA", Value: strconv.Quote(cfg.ReportCA), Want: "needs an https:// report URL"}
		}
	}
	return cfg.Limits.Validate()
}

var discardLogger = slog.New(slog.DiscardHandler)

// nodeName is name, or the host's name when name is empty.
func nodeName(name string) (string, error) {
	if name != "" {
		return name, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("no node name given and no hostname: %w", err)
	}
	return h, nil
}

// registry is the agent's own registry, with the process and Go collectors.
func registry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	if err := registerProcess(reg); err != nil {
		return nil, err
	}
	return reg, nil
}

// openQueue opens the report queue at path, logs and counts what it had
// to skip or drop, and makes sure the next seq of this run is above every
// seq the queue holds (in case the state's last save failed).
func (a *Agent) openQueue(path string, max int) (*queue, error) {
	q, ld, err := openQueue(path, max)
	if err != nil {
		return nil, err
	}
	for _, s := range ld.bad {
		a.log.Warn("report queue: skipped a line that is not one report (cut by a crash or a full disk?); the lines after it are kept",
			"path", path, "offset", s.offset, "length", s.length, "reason", s.reason)
	}
	if n := ld.badLines - int64(len(ld.bad)); n > 0 {
		a.log.Warn("report queue: skipped more lines that are not reports; the lines after them are kept",
			"path", path, "lines", n, "bytes", ld.badBytes-sumLength(ld.bad))
	}
	a.m.reportsDropped.WithLabelValues("torn").Add(float64(ld.badLines))
	a.m.reportsDropped.WithLabelValues("overflow").Add(float64(ld.dropped.n))
	logDrops(a.log, "report queue held more than its bound; dropped the oldest", ld.dropped, max)
	// A seq past the bound is a corrupt line (it is sent, and refused):
	// going on from it would have every reading refused.
	//
	// The queue holds a report before the state holds its seq (see Step):
	// after a crash in between, the queue has the latest seq (and at).
	if seq, at := q.maxSeq(a.run); seq > a.seq && seq < maxSavedSeq {
		a.seq = seq
		if at.After(a.lastAt) {
			a.lastAt = at
		}
	}
	for node, n := range q.nodes(a.node) {
		a.log.Warn("reports queued under another node name (-node changed?): each is sent under that name, and dropped if the platform's answer says the token may not report for it",
			"queued_node", node, "reports", n, "node", a.node)
	}
	a.m.reportsQueued.Set(float64(q.len()))
	return q, nil
}

// newReporter returns the reporter of cfg.ReportURL.
func (a *Agent) newReporter(cfg Config, client *http.Client) *reporter {
	retryMax := cmp.Or(cfg.RetryMax, a.interval)
	return &reporter{
		node:      a.node,
		url:       cfg.ReportURL,
		tok:       a.tok,
		userAgent: cmp.Or(cfg.UserAgent, buildinfo.Read().UserAgent("proofkit-agent")),
		client:    noRedirects(client),
		q:         a.q,
		log:       a.log,
		m:         a.m,
		dm:        a.dm,
		retryMin:  min(time.Second, retryMax),
		retryMax:  retryMax,
		wake:      make(chan struct{}, 1),
	}
}

// noRedirects returns a copy of c (or of the default client when c is
// nil) that never follows a redirect: a client that follows one sends a
// report's POST on as a GET without its body and takes the answer to that
// for the report's.
func noRedirects(c *http.Client) *http.Client {
	if c == nil {
		c = defaultClient()
	}
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
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

// minStepTimeout is the least time Run gives one Step.
const minStepTimeout = 5 * time.Second

// Run takes a reading at once and then every interval, and sends reports
// in the background, until ctx ends. It then writes the state a last time
// and returns nil; an error only when that write fails. Reports in flight
// or queued stay on disk for the next run.
//
// Each Step gets the interval (at least 5 s) to finish: a reading that a
// file or socket holds longer (a hung FUSE or network mount under /proc)
// fails, is logged and counted as a reading error, and the next reading
// is taken on time (the probe then skips what still blocks, as missing).
func (a *Agent) Run(ctx context.Context) error {
	a.hmu.Lock()
	a.started = time.Now()
	a.hmu.Unlock()
	var wg sync.WaitGroup
	if a.rep != nil {
		wg.Go(func() { a.rep.run(ctx) })
	}
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, a.stepTimeout)
		_, _ = a.Step(sctx)
		cancel()
		select {
		case <-ctx.Done():
			wg.Wait()
			// The state first: it is small, and a compaction cut short by
			// the process's end leaves the queue file as it was.
			err := a.Save()
			a.compactQueue()
			return err
		case <-t.C:
		}
	}
}

// compactQueue leaves the queue file holding exactly the queued reports
// as Run ends: none already sent (so the next start sends none twice),
// and, if there is room now, the reports that could only be kept in
// memory (a full disk). Those it cannot write are lost with the process,
// and the log says how many.
func (a *Agent) compactQueue() {
	if a.q == nil {
		return
	}
	if err := a.q.compact(); err != nil {
		a.log.Error("could not write the report queue at stop; the reports kept in memory only are lost",
			"queued", a.q.len(), "err", err)
	}
}

// Step takes one reading, evaluates it, logs what changed, saves the state
// and queues the reading as a report. Run calls it every interval; it is
// exported for callers that drive the agent themselves.
//
// The reading goes out as the wire format's version 2: Step sets its run
// and the next seq, and dates it by the later of the source's At (the
// wall clock) and the previous reading's at plus the monotonic time since
// it (one second after a restart), so at never runs backwards when the
// wall clock is stepped back; see overload.ReadingVersion. The seq is
// queued (and written to disk) before the state holding it is saved, and
// sent only once it is: a crash before the save leaves the report queued,
// and the next start goes on from the seq the queue holds; a crash after
// it leaves both. So a crash leaves no gap in the seqs, and never one seq
// on two readings (which a report sent and taken off the queue before the
// save could otherwise give).
//
// Step returns once ctx ends even if the source's Read does not: the read
// is then left to finish on its own, and the next Step waits for it.
func (a *Agent) Step(ctx context.Context) (overload.Result, error) {
	r, moved, err := a.read(ctx)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) { // stopping: not a failed reading
			return overload.Result{}, ctx.Err()
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("the reading did not finish by its deadline (a file or socket that does not answer?): %w", err)
		}
		a.m.readingErrors.Inc()
		a.log.Error("reading failed", "err", err)
		return overload.Result{}, fmt.Errorf("take reading: %w", err)
	}
	r.Node = a.node
	r.Version = overload.ReadingVersion

	a.mu.Lock()
	mono := time.Now()
	elapsed := time.Second      // across a restart
	var sinceLast time.Duration // monotonic; 0 for the first reading of this process
	if !a.lastMono.IsZero() {
		elapsed = mono.Sub(a.lastMono)
		sinceLast = elapsed
	}
	if r.At.IsZero() {
		r.At = a.now()
	}
	r.At = nextAt(r.At, a.lastAt, elapsed)
	r.Run, r.Seq = a.run, a.seq+1
	res, err := a.tracker.Observe(r)
	if err != nil {
		a.mu.Unlock()
		reason := dropReason(err)
		a.m.readingErrors.Inc()
		a.dm.readingsDropped.WithLabelValues(reason).Inc()
		a.log.Error("reading not evaluated; dropped", "reason", reason, "at", r.At, "err", err)
		return overload.Result{}, fmt.Errorf("evaluate reading: %w", err)
	}
	a.seq, a.lastAt, a.lastMono = r.Seq, r.At, mono
	a.last = &r
	since := a.tracker.Since()
	a.mu.Unlock()

	a.m.observeReading(r, moved, sinceLast)
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

	// The report first, held back from sending, then the state with its
	// seq, then the report may go: see above. Both go to the directory
	// this agent locked, or to memory: one look at the lock for both.
	held := a.holdStateDir()
	id, queued := a.queueReport(r)
	testKill("between", r.Seq)
	saveErr := a.save(held)
	if saveErr != nil {
		a.log.Error("could not save state", "err", saveErr)
		if a.rep != nil {
			r = a.leaveSavedRun(r, id, queued)
		}
	}
	if queued {
		a.rep.release(id)
	}
	a.noteStep(r, res, saveErr)
	a.miss.log(a.log, r)
	a.logResult(r, res)
	return res, nil
}

// leaveSavedRun is called when the state holding reading r's seq could
// not be saved (a full disk). If state.json holds r's run, a restart would
// go on from the seq saved there and number a later reading as r: the
// platform would then hold two readings under one run and seq. So r, and
// the readings after it, go on in a new run, which no restart resumes;
// the first save that succeeds makes it the saved run. It returns r as
// it is to be reported.
//
// The report of r, queued as id when queued is true, is renumbered too.
func (a *Agent) leaveSavedRun(r overload.Reading, id uint64, queued bool) overload.Reading {
	r = a.renumber(r)
	if b, err := json.Marshal(r); err == nil && queued {
		if err := a.rep.q.replace(id, b); err != nil {
			a.log.Error("could not rewrite the report queue on disk; the report is kept in memory and sent while the agent runs",
				"run", r.Run, "seq", r.Seq, "err", err)
		}
	}
	return r
}

// renumber moves r into a new run if state.json holds r's run (see
// leaveSavedRun).
func (a *Agent) renumber(r overload.Reading) overload.Reading {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.runOnDisk || a.run != r.Run || a.seq != r.Seq {
		return r
	}
	old, oldSeq := r.Run, r.Seq
	a.run, a.seq, a.runOnDisk = newRun(), 1, false
	r.Run, r.Seq = a.run, a.seq
	last := r
	a.last = &last
	a.log.Warn("the state could not be saved, so a restart would number readings again from the last saved seq; this reading and the next go on in a new run",
		"run", old, "seq", oldSeq, "new_run", r.Run, "new_seq", r.Seq)
	return r
}

// queueReport queues r's report, held back from sending until release,
// when the agent reports; queued says whether it is in the queue (on disk,
// or in memory only when the write failed: that is logged).
func (a *Agent) queueReport(r overload.Reading) (id uint64, queued bool) {
	if a.rep == nil {
		return 0, false
	}
	body, err := json.Marshal(r)
	if err == nil {
		id, err = a.rep.enqueue(body)
		queued = err == nil || id != noID
	}
	if err != nil {
		a.log.Error("could not write the report to the queue on disk; it is kept in memory and sent while the agent runs",
			"run", r.Run, "seq", r.Seq, "err", err)
	}
	return id, queued
}

// read calls the source's Read, returning when ctx ends even if Read does
// not. Only one Read runs at a time.
//
// moved is what the source's ReadLinkBytes gave; nil when it has none
// (see LinkByteSource).
func (a *Agent) read(ctx context.Context) (r overload.Reading, moved []probe.LinkBytes, err error) {
	select {
	case a.reading <- struct{}{}:
	case <-ctx.Done():
		return overload.Reading{}, nil, ctx.Err()
	}
	type result struct {
		r     overload.Reading
		moved []probe.LinkBytes
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		defer func() { <-a.reading }()
		var res result
		if bs, ok := a.src.(LinkByteSource); ok {
			res.r, res.moved, res.err = bs.ReadLinkBytes(ctx)
		} else {
			res.r, res.err = a.src.Read(ctx)
		}
		ch <- res
	}()
	select {
	case res := <-ch:
		return res.r, res.moved, res.err
	case <-ctx.Done():
		return overload.Reading{}, nil, ctx.Err()
	}
}

// nextAt dates a reading whose wall-clock time is wall, taken elapsed
// (monotonic) after the previous reading, dated last (zero for the first
// reading of a run): the later of wall and last+elapsed, and always after
// last. A wall clock stepped back is so absorbed; one stepped forward is
// taken as it comes.
func nextAt(wall, last time.Time, elapsed time.Duration) time.Time {
	wall = wall.Round(0) // no monotonic reading: at is a wall-clock instant
	if last.IsZero() {
		return wall
	}
	floor := last.Add(max(elapsed, time.Nanosecond))
	if wall.Before(floor) {
		return floor
	}
	return wall
}

// dropReason names why the agent's own tracker refused a reading, as the
// reason label of proofkit_agent_readings_dropped_total.
func dropReason(err error) string {
	switch {
	case errors.Is(err, overload.ErrDuplicate):
		return "duplicate"
	case errors.Is(err, overload.ErrOutOfOrder):
		return "older"
	default:
		return "invalid"
	}
}

func (a *Agent) logResult(r overload.Reading, res overload.Result) {
	a.log.Debug("reading", "run", r.Run, "seq", r.Seq, "at", r.At, "memory_used_percent", r.MemoryUsedPercent,
		"load15", r.Load15, "cpus", r.CPUs, "conntrack_entries", r.ConntrackEntries,
		"conntrack_max", r.ConntrackMax, "conntrack_drops", r.ConntrackDrops,
		"listen_drops", r.ListenDrops, "missing", r.Missing, "overloaded", res.Overloaded)
	if e := res.Event; e != nil {
		switch e.Kind {
		case overload.Start:
			a.log.Warn("node overloaded", "node", a.node, "at", e.At, "findings", overload.Texts(e.Findings))
		case overload.End:
			a.log.Info("overload ended", "node", a.node, "at", e.At, "lasted", e.Lasted.Round(time.Second))
		}
	}
	if n := res.Notice; n != nil {
		a.m.notices.Inc()
		a.log.Warn("overload notice", "node", a.node, "at", n.At, "notice", n.String())
	}
}
