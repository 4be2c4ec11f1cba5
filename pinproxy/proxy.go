package pinproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrProxyClosed is returned by Serve and Rebalance once Shutdown has been
// called.
var ErrProxyClosed = errors.New("pinproxy: proxy closed")

// Proxy forwards client connections to upstreams, least-used first, and
// rebalances them. Create one with New; its methods are safe for concurrent
// use.
type Proxy struct {
	cfg   Config
	log   *slog.Logger
	clock func() time.Time // cfg.clock, or time.Now
	// dial is cfg.DialContext or, when that is nil, the proxy's own
	// net.Dialer, which sets keepalive as configured on each upstream
	// conn, so connect need not set it again.
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	keepAlive net.KeepAliveConfig // what setKeepAlive sets, from cfg.KeepAlive
	bufs      sync.Pool           // the data path's buffers for small bursts (copy_linux.go)
	park      *parker             // parks idle connections (park_linux.go); nil: never
	loops     *loops              // the event loops that relay connections (loop_linux.go); nil: goroutines do

	// stopCtx ends when Shutdown is called: it stops the rebalance
	// rounds and the accept loops' back-off sleeps. killCtx ends when
	// Shutdown gives up waiting (or returns): it aborts dials in flight,
	// and connect, which checks it under mu, links no connection after it.
	stopCtx  context.Context
	stop     context.CancelFunc
	killCtx  context.Context
	kill     context.CancelFunc
	handlers sync.WaitGroup // one per accepted client; Add only under mu while !closed
	ticker   sync.WaitGroup // the rebalance, check and duplicate-warning goroutines; Add only under mu while !closed

	active      atomic.Int64 // client connections being handled, for MaxConns
	accepted    atomic.Int64
	rejected    atomic.Int64
	unrouted    atomic.Int64
	localErrors atomic.Int64 // accepts and dials that failed for want of local resources
	localLog    rateLimited  // lines about local errors
	rejectLog   rateLimited  // lines about clients closed at MaxConns
	dialLog     rateLimited  // lines about dials that failed
	unroutedLog rateLimited  // lines about clients closed because no upstream answered

	lineQ   lineQueue     // connections' lines waiting for lineLoop (lines.go)
	lineOut *lockedWriter // NewLogHandler's writer, when it is the logger's handler: lineLoop writes lines itself

	rebalanceMu sync.Mutex // one round at a time; an upgrade holds it too

	// accepting counts the Serve loops inside Accept or admitting what it
	// returned; starting, the handlers not yet copying (dialing, sending
	// the PROXY header). A hand-over waits for both to be zero, in that
	// order, once it has held the accepts (upgrade_linux.go waitStarted).
	accepting atomic.Int64
	starting  atomic.Int64
	upg       upgrades // upgrade.go

	mu            sync.Mutex
	upstreams     []*upstream // the current list, in order of preference
	leaving       []*upstream // removed by SetUpstreams, with connections left
	gen           int         // bumped by SetUpstreams, so connect knows its tried set is stale
	moves         int64       // connections closed by rebalance rounds and drains
	failedMoves   int64       // moves whose redial the idle upstream refused (session.go)
	listeners     map[net.Listener]struct{}
	handover      chan struct{}             // while a Handoff runs, from when it lists the listeners; closed when it ends
	presetKA      map[net.Listener]struct{} // made by Listen: accepted conns have keepalive set already
	tickerStarted bool
	closed        bool // Shutdown was called
}

// conn is one client pinned to one upstream.
type conn struct {
	client, upstream net.Conn
	up               *upstream
	start            time.Time
	link             *link                // its data path, set before it copies
	looped           atomic.Pointer[link] // link, once an event loop may hold it: closeConn tells the loop
	prev, next       *conn                // guarded by Proxy.mu
	linked           bool                 // guarded by Proxy.mu
	reason           endReason            // guarded by Proxy.mu; set by whoever closes it from outside

	// Its session, as session.go watches it: when its dial answered (the
	// real clock; zero when not watched), and, guarded by Proxy.mu, its
	// trial's timer while on trial and whether it is a moved
	// connection's redial.
	dialed    time.Time
	trial     *time.Timer
	successor bool
}

// endReason says why a connection ended, in its log line.
type endReason int8

const (
	endClosed     endReason = iota // both sides ended their streams
	endClient                      // the client closed first
	endUpstream                    // the upstream closed first
	endRebalanced                  // a rebalance round moved it
	endDrained                     // its upstream was removed and drained, or Shutdown stopped waiting
	endError                       // a copy failed
)

func (r endReason) String() string {
	return [...]string{"closed", "client closed", "upstream closed", "rebalanced", "drained", "error"}[r]
}

// New checks cfg and returns a Proxy that is ready to Serve. The error
// names the bad field or upstream entry.
func New(cfg Config) (*Proxy, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:       cfg,
		log:       cfg.Logger,
		dial:      cfg.DialContext,
		clock:     cfg.clock,
		listeners: make(map[net.Listener]struct{}),
		presetKA:  make(map[net.Listener]struct{}),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if h, ok := p.log.Handler().(*logHandler); ok {
		p.lineOut = &h.out
	}
	if p.clock == nil {
		p.clock = time.Now
	}
	// Idle time and interval as configured; the probe count stays the
	// kernel's (Count -1: one setsockopt fewer per socket).
	p.keepAlive = net.KeepAliveConfig{Enable: true, Idle: cfg.KeepAlive, Interval: cfg.KeepAlive, Count: -1}
	if cfg.KeepAlive < 0 {
		p.keepAlive = net.KeepAliveConfig{Enable: false, Idle: -1, Interval: -1, Count: -1}
	}
	p.bufs.New = newBurstBuf
	mem := new(memoryGate)
	p.park = newParker(cfg.ParkAfter, p.setKeepAlive, time.Now(), mem)
	p.loops = newLoops(!cfg.goroutines, cfg.ParkAfter, p.keepAlive, mem)
	if p.park != nil {
		p.park.lps = p.loops
	}
	if p.dial == nil {
		// Unless the parker sets it (kaLater), the dialer sets keepalive
		// once, as configured (KeepAlive is ignored when KeepAliveConfig
		// is enabled; -1 turns it off otherwise).
		d := &net.Dialer{KeepAlive: -1}
		if !p.kaLater() {
			d.KeepAliveConfig, d.Control = p.keepAlive, p.dialControl()
		}
		p.dial = d.DialContext
	}
	p.stopCtx, p.stop = context.WithCancel(context.Background())
	p.killCtx, p.kill = context.WithCancel(context.Background())
	if p.loops != nil {
		context.AfterFunc(p.killCtx, p.loops.stop)
	}
	p.upstreams = make([]*upstream, len(cfg.Upstreams))
	for i, addr := range cfg.Upstreams {
		p.upstreams[i] = &upstream{addr: addr}
	}
	return p, nil
}

// Listen announces on the local address addr ("tcp", "tcp4" or "tcp6"
// network, host:port), as net.Listen does, for Serve. Clients accepted
// from it get TCP keepalive as Config.KeepAlive says from the listening
// socket itself (on Linux, where accepted sockets inherit it) or from the
// accept, so Serve need not set it again on each: fewer syscalls per
// connection than a plain net.Listen. ctx bounds the call, not the
// listener.
func (p *Proxy) Listen(ctx context.Context, network, addr string) (net.Listener, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("pinproxy: listen on %s %s: network must be tcp, tcp4 or tcp6", network, addr)
	}
	lc := p.listenConfig()
	ln, err := lc.Listen(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("pinproxy: %w", err)
	}
	p.mu.Lock()
	p.presetKA[ln] = struct{}{}
	p.mu.Unlock()
	return ln, nil
}

// Serve accepts client connections on ln and proxies each to an upstream
// until Shutdown is called; then it returns ErrProxyClosed. Any other
// accept error that is not temporary ends Serve with that error (on
// Linux, a *net.TCPListener its owner closes, rather than Shutdown, ends
// it within a second: the proxy's event loops accept from a duplicate
// of the listening socket, which does not see the close at once). Serve
// closes ln when it returns. It may be called on several listeners at
// once; the first call starts the rebalance rounds, which run every
// Config.RebalanceInterval until Shutdown. Serve sets TCP keepalive, as
// Config.KeepAlive says, on each client it accepts, unless ln came from
// Listen, which set it already. Called while a Handoff runs, Serve waits
// for it to end before it accepts: ln is not handed over, and Serve
// returns ErrProxyClosed if the hand-over committed.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	_, preset := p.presetKA[ln] // kept until Serve returns, for a hand-over
	if p.closed {
		delete(p.presetKA, ln)
		p.mu.Unlock()
		ln.Close()
		return ErrProxyClosed
	}
	p.listeners[ln] = struct{}{}
	handover := p.handover
	if !p.tickerStarted {
		p.tickerStarted = true
		p.startLines()
		if p.cfg.RebalanceInterval > 0 {
			p.ticker.Add(1)
			go p.every(p.cfg.RebalanceInterval, "rebalance", p.Rebalance)
		}
		if p.cfg.CheckInterval > 0 {
			p.ticker.Add(1)
			go p.checkLoop()
		}
		p.ticker.Add(1)
		go p.warnDuplicates(p.upstreamAddrsLocked())
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, ln)
		delete(p.presetKA, ln)
		p.mu.Unlock()
		ln.Close()
	}()
	// The hand-over listed the listeners before ln came: it does not hold
	// ln's accepts, and waits for every Serve loop to be out of Accept.
	if handover != nil {
		select {
		case <-handover:
		case <-p.stopCtx.Done():
		}
		if p.stopCtx.Err() != nil { // committed (or Shutdown)
			return ErrProxyClosed
		}
	}

	// On Linux, with the event loops, the loops take a TCP listener's
	// clients as bare sockets and dial for them (accept_linux.go); Serve
	// waits for what ends or pauses that.
	raw := p.rawListener(ln, preset)
	defer raw.close()
	var delay time.Duration
	for {
		p.accepting.Add(1)
		var c net.Conn
		var err error
		if raw != nil {
			err = raw.accept() // the loops count each client in starting, unless they close it
			if raw.accepted() {
				delay = 0
			}
		} else {
			c, err = ln.Accept()
		}
		if err != nil {
			p.accepting.Add(-1)
			if p.stopCtx.Err() != nil {
				return ErrProxyClosed
			}
			if p.acceptsHeld(ln) { // an upgrade held them, and let them go again
				continue
			}
			if !temporary(err) {
				return fmt.Errorf("pinproxy: accept on %s: %w", ln.Addr(), err)
			}
			// Out of file descriptors or memory: wait, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			if localError(err) {
				p.logLocal("accept failed for want of local resources; retrying",
					slog.String("listener", ln.Addr().String()), slog.Duration("in", delay), slog.Any("err", err))
			} else {
				p.log.LogAttrs(p.stopCtx, slog.LevelWarn, "accept failed; retrying",
					slog.String("listener", ln.Addr().String()), slog.Duration("in", delay), slog.Any("err", err))
			}
			// Out of descriptors, the loops take no client until there is
			// room for one and its upstream's socket: one taken sooner
			// would be closed, its dial finding none.
			for {
				t := time.NewTimer(delay)
				select {
				case <-t.C:
				case <-p.stopCtx.Done():
					t.Stop()
					return ErrProxyClosed
				}
				if !localError(err) || raw.room() {
					break
				}
				delay = min(2*delay, time.Second)
			}
			continue
		}
		delay = 0
		if c != nil {
			p.accept(c, preset) // counts c in starting, unless it closes it
		}
		p.accepting.Add(-1)
	}
}

// outcome is what one dial to an upstream came to.
type outcome int8

const (
	answered    outcome = iota // the upstream answered
	refused                    // it did not: that counts against it
	noResources                // this host is out of descriptors, buffers or memory: counts against nobody
	gaveUp                     // ctx ended first
)

// attempt dials u once, within timeout and ctx: a client's dial, a
// rebalance or drain test-connect, or a health check. It returns the conn
// when u answered (the caller records the outcome, under mu, as it counts
// it). When this host is out of resources it counts a local error and
// logs local, rate-limited, with attrs and the error.
func (p *Proxy) attempt(ctx context.Context, u *upstream, timeout time.Duration, local string, attrs ...slog.Attr) (net.Conn, outcome, error) {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	c, err := p.dial(dctx, "tcp", u.addr)
	cancel()
	if err == nil {
		return c, answered, nil
	}
	return nil, p.failure(ctx, err, local, attrs...), err
}

// failure is what a dial that failed with err, within ctx, came to:
// gaveUp once ctx ended; noResources when this host is out of resources
// (a local error, counted and logged as attempt says); refused otherwise.
func (p *Proxy) failure(ctx context.Context, err error, local string, attrs ...slog.Attr) outcome {
	switch {
	case ctx.Err() != nil:
		return gaveUp
	case localError(err):
		p.logLocal(local, append(attrs, slog.Any("err", err))...)
		p.pauseAccepts(err)
		return noResources
	}
	return refused
}

// dialLocal is the line logged when a client's dial finds this host out
// of resources.
const dialLocal = "cannot dial for want of local resources; closing the client"

// temporary reports whether an accept error may go away by itself.
func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return localError(err) || errors.Is(err, syscall.ECONNABORTED)
}

// localError reports whether err says this host ran out of something (file
// descriptors, buffers, memory): not an upstream's fault.
func localError(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// rateLimited logs one kind of line at most once a second, adding the
// number of lines it left out since the last one (not_logged_since) when
// there were any: a proxy out of file descriptors, or in front of
// thousands of upstreams that refuse, would otherwise write a line per
// client or per dial.
type rateLimited struct {
	last  atomic.Int64 // when a line was last logged, Unix ns
	quiet atomic.Int64 // lines left out since then
}

// log logs msg unless a line went out less than a second before now.
func (r *rateLimited) log(p *Proxy, now time.Time, level slog.Level, msg string, attrs ...slog.Attr) {
	t := now.UnixNano()
	last := r.last.Load()
	if last != 0 && t-last < int64(time.Second) || !r.last.CompareAndSwap(last, t) {
		r.quiet.Add(1)
		return
	}
	if n := r.quiet.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("not_logged_since", n))
	}
	p.log.LogAttrs(p.stopCtx, level, msg, attrs...)
}

// logLocal counts a local error and logs it, rate-limited.
func (p *Proxy) logLocal(msg string, attrs ...slog.Attr) {
	p.localErrors.Add(1)
	p.localLog.log(p, p.clock(), slog.LevelWarn, msg, attrs...)
}

// logRejected logs a client closed at the connection cap, rate-limited,
// with the number closed so far.
func (p *Proxy) logRejected(client net.Conn, limit int64) {
	p.rejectLog.log(p, p.clock(), slog.LevelWarn, "too many connections; closing the client",
		slog.String("client", client.RemoteAddr().String()), slog.Int64("max_conns", limit),
		slog.Int64("rejected_total", p.rejected.Load()))
}

// accept admits a client and starts its handler, or closes it when the
// proxy is full or shutting down. preset: the client's keepalive is set
// already (it came from a listener made by Listen).
func (p *Proxy) accept(client net.Conn, preset bool) {
	if !p.admit(client) {
		client.Close()
		return
	}
	go p.handle(client, preset)
}

// admit counts an accepted client and reports whether it may be served:
// not over MaxConns (logged), nor once the proxy is closed. An admitted
// client counts in active, handlers and starting until its handler is
// done with it; the caller closes one not admitted.
func (p *Proxy) admit(client net.Conn) bool {
	p.accepted.Add(1)
	if limit := int64(p.cfg.MaxConns); limit > 0 {
		for {
			n := p.active.Load()
			if n >= limit {
				p.rejected.Add(1)
				p.logRejected(client, limit)
				return false
			}
			if p.active.CompareAndSwap(n, n+1) {
				break
			}
		}
	} else {
		p.active.Add(1)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.active.Add(-1)
		return false
	}
	p.handlers.Add(1)
	p.starting.Add(1)
	p.mu.Unlock()
	return true
}

// handle pins one client to an upstream and copies bytes until both are done.
func (p *Proxy) handle(client net.Conn, preset bool) {
	growStack(0)
	if !preset {
		p.setKeepAlive(client)
	}
	defer p.starting.Add(-1)
	c := p.connect(client)
	if c == nil {
		client.Close()
		p.active.Add(-1)
		p.handlers.Done()
		return
	}
	if p.cfg.SendProxy != 0 {
		if err := p.sendProxyHeader(c, time.Now()); err != nil {
			c.client.Close()
			c.upstream.Close()
			p.finish(c, spliceResult{err: err})
			return
		}
	}
	c.link = newLink(c.client, c.upstream, &p.bufs, &c.up.bytes, func(r spliceResult) { p.finish(c, r) })
	c.link.kaPending.Store(p.kaLater())
	if p.loops != nil {
		c.looped.Store(c.link)
		if p.loops.attach(c.link, [2]bool{!preset, p.cfg.DialContext != nil}) {
			return
		}
	}
	// This goroutine's stack is 8 KiB, for the dial (growStack), and a
	// goroutine keeps its stack for life: hand the
	// connection to a fresh goroutine, which stays at 2 KiB while the
	// connection idles. Measured with internal/tools/proxybench: 13.6 → 7.8 KiB
	// per idle proxied connection.
	go p.serveConn(c)
}

// growStack grows the calling goroutine's stack from the runtime's 2 KiB to
// 8 KiB in one step, while it holds a frame or two: the dial needs between
// 4 and 8 KiB, and growing there, deep in net's calls, took two growths,
// each copying the stack and adjusting every frame's pointers (5 % of the
// proxy's CPU under a connection-rate load, in runtime.newstack). The
// runtime grows a stack by as many doublings as the frame being entered
// needs, so one frame of 5 KiB does it (CockroachDB's growstack package
// does the same). The array is read so that it is not optimised away; it
// costs zeroing 5 KiB.
//
//go:noinline
func growStack(i int) byte {
	var b [5 << 10]byte
	return b[i&(len(b)-1)]
}

// serveConn spends the connection's life in splice (until it parks:
// then splice returns early and finish runs later in the goroutine that
// woke it). Its frame must stay small (the bookkeeping and logging live in
// finish) so the goroutine keeps its initial stack.
func (p *Proxy) serveConn(c *conn) {
	c.link.start(p.park)
}

// finish unlinks a connection whose copying ended and queues its line for
// lineLoop (lines.go), which formats it off the connection's small stack.
func (p *Proxy) finish(c *conn, r spliceResult) {
	defer p.handlers.Done()
	defer p.active.Add(-1)
	p.mu.Lock()
	p.unlinkLocked(c)
	reason := c.reason
	p.sessionEndedLocked(c, r) // refused or held (session.go)
	p.mu.Unlock()
	err := r.err
	if reason == endClosed {
		switch {
		case err != nil && !errors.Is(err, net.ErrClosed):
			reason = endError
		case r.first == sideClient:
			reason = endClient
		case r.first == sideUpstream:
			reason = endUpstream
		}
	}
	level := slog.LevelDebug
	if p.cfg.LogConnections {
		level = slog.LevelInfo
	}
	if !p.log.Enabled(p.stopCtx, level) { // first: a line not logged costs nothing
		return
	}
	e := endLine{c: c, r: r, reason: reason, level: level, at: p.clock()}
	if !p.queueLine(e) {
		p.logEnd(e)
	}
}

// appendAddr appends a's host:port to b, as a.String() would write it,
// without allocating for a TCP address.
func appendAddr(b []byte, a net.Addr) []byte {
	if ta, ok := a.(*net.TCPAddr); ok && ta.Zone == "" {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).AppendTo(b)
	}
	if a == nil {
		return b
	}
	return append(b, a.String()...)
}

// roundForLog rounds d to what a person reads in a log line: whole
// seconds from 10 s on (lasted=14s), whole minutes from an hour on, tenths
// of a second from 1 s, milliseconds below that.
func roundForLog(d time.Duration) time.Duration {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute)
	case d >= 10*time.Second:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}

// endLocked records why c is about to be closed from outside its
// goroutine (see closeConn), for its log line. Call with p.mu held.
func (p *Proxy) endLocked(c *conn, reason endReason) {
	if c.reason == endClosed {
		c.reason = reason
	}
}

// closeConn closes both sides of c from outside its goroutine, which then
// finishes it. Call it without p.mu held, after endLocked.
func (p *Proxy) closeConn(c *conn) {
	if l := c.looped.Load(); l != nil && l.kill() {
		return
	}
	p.park.closePair(c.client, c.upstream)
}

// connect dials upstreams, least-used first, until one answers, and links
// the pair into that upstream's list. It returns nil when none answers or
// the proxy is being torn down.
func (p *Proxy) connect(client net.Conn) *conn {
	var r route
	for {
		u, now := p.nextUpstream(&r, client)
		if u == nil {
			return nil
		}
		uc, out, err := p.attempt(p.killCtx, u, p.cfg.DialTimeout, dialLocal,
			slog.String("client", client.RemoteAddr().String()), slog.String("upstream", u.addr))
		if out != answered {
			if p.dialFailed(u, client, now, out, err) {
				continue
			}
			return nil
		}
		c := &conn{client: client, upstream: uc, up: u, start: now}
		if !p.dialAnswered(c) {
			uc.Close()
			return nil
		}
		if p.cfg.DialContext != nil && !p.kaLater() { // the proxy's own dialer has set it
			p.setKeepAlive(uc)
		}
		return c
	}
}

// route is one client's way through the upstreams, least-used first: the
// ones its dials tried, as bits of the list's index (for the list of
// generation gen) and by pointer, should SetUpstreams change the list
// meanwhile.
type route struct {
	small    [1]uint64
	smallUps [2]*upstream // triedUps' first array: most clients dial once or twice
	tried    []uint64
	triedUps []*upstream
	gen      int // the list's generation tried is for; 0 with tried nil: none yet
	attempts int // dials that failed, for Config.MaxDialAttempts
}

// nextUpstream picks the upstream client's next dial goes to, not tried
// yet in r, and counts the dial in it; nil when none is left (logged:
// the client is to be closed) or the proxy is being torn down. now is
// the proxy's time of the pick.
func (p *Proxy) nextUpstream(r *route, client net.Conn) (*upstream, time.Time) {
	now := p.clock()
	p.mu.Lock()
	if p.killCtx.Err() != nil {
		p.mu.Unlock()
		return nil, now
	}
	if r.tried == nil && len(p.upstreams) <= 64 {
		r.tried, r.gen = r.small[:], p.gen
	}
	if r.tried == nil || p.gen != r.gen { // first, with many upstreams, or the list changed: (re)build tried
		r.gen = p.gen
		r.tried = make([]uint64, (len(p.upstreams)+63)/64)
		for i, u := range p.upstreams {
			if slices.Contains(r.triedUps, u) {
				r.tried[i/64] |= 1 << (i % 64)
			}
		}
	}
	i, u := p.pickLocked(r.tried, now)
	if u == nil || p.cfg.MaxDialAttempts > 0 && r.attempts >= p.cfg.MaxDialAttempts {
		n := len(p.upstreams)
		p.mu.Unlock()
		p.unrouted.Add(1)
		p.unroutedLog.log(p, now, slog.LevelWarn, "no upstream answers; closing the client",
			slog.String("client", client.RemoteAddr().String()), slog.Int("upstreams", n), slog.Int("tried", r.attempts))
		return nil, now
	}
	r.attempts++
	u.dialing++
	u.dials++
	p.mu.Unlock()
	r.tried[i/64] |= 1 << (i % 64)
	if r.triedUps == nil {
		r.triedUps = r.smallUps[:0]
	}
	r.triedUps = append(r.triedUps, u)
	return u, now
}

// dialFailed records a client's dial to u, picked at now, that did not
// answer (out), and reports whether the client's next dial may go on to
// the next upstream: not when the proxy is torn down or this host is out
// of resources, where every upstream would fail the same way.
func (p *Proxy) dialFailed(u *upstream, client net.Conn, now time.Time, out outcome, err error) bool {
	p.mu.Lock()
	u.dialing--
	p.forgetLocked(u)
	if out != refused {
		p.mu.Unlock()
		return false
	}
	p.failedLocked(u, p.clock(), err, false, false)
	p.mu.Unlock()
	p.dialLog.log(p, now, slog.LevelWarn, "upstream does not answer; trying the next",
		slog.String("client", client.RemoteAddr().String()), slog.String("upstream", u.addr), slog.Any("err", err))
	return true
}

// dialAnswered records a client's dial to c.up, picked at c.start, that
// answered with c.upstream, and links c; false when the proxy is being
// torn down (the caller closes the upstream).
func (p *Proxy) dialAnswered(c *conn) bool {
	u := c.up
	p.mu.Lock()
	u.dialing--
	p.answeredLocked(u, p.clock(), false)
	if p.killCtx.Err() != nil {
		p.forgetLocked(u)
		p.mu.Unlock()
		return false
	}
	p.linkLocked(c)
	p.dialedLocked(c)
	live := u.live
	p.mu.Unlock()
	if p.log.Enabled(p.stopCtx, slog.LevelDebug) { // spare the address strings otherwise
		p.log.LogAttrs(p.stopCtx, slog.LevelDebug, "client pinned to upstream",
			slog.String("client", c.client.RemoteAddr().String()), slog.String("upstream", u.addr), slog.Int("live", live))
	}
	return true
}

func (p *Proxy) linkLocked(c *conn) {
	u := c.up
	c.prev, c.next = u.tail, nil
	if u.tail != nil {
		u.tail.next = c
	} else {
		u.head = c
	}
	u.tail = c
	u.live++
	c.linked = true
}

func (p *Proxy) unlinkLocked(c *conn) {
	if !c.linked {
		return
	}
	u := c.up
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		u.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		u.tail = c.prev
	}
	c.prev, c.next = nil, nil
	u.live--
	c.linked = false
	p.forgetLocked(u)
}

// forgetLocked drops a removed upstream from p.leaving once nothing is
// left on it: no connection, no dial in flight.
func (p *Proxy) forgetLocked(u *upstream) {
	if u.removed && u.load() == 0 {
		p.leaving = slices.DeleteFunc(p.leaving, func(v *upstream) bool { return v == u })
	}
}

// kaLater reports whether an upstream's keepalive is set by the parker's
// first sweep after the dial, within a second (see parker.keepAlive), or
// by its event loop a second or two after it (evloop.kaq), rather than at
// the dial: so with a parker. A connection that ends
// sooner, as most short ones do, spares four setsockopt calls; a probe
// is due only after the idle time (30 s by default), so setting it a
// sweep late delays none.
func (p *Proxy) kaLater() bool { return p.park != nil && p.keepAlive.Enable }

// setKeepAlive turns TCP keepalive on (or off) as configured. A conn
// accepted from a listener not made by Listen gets it here even though
// Go's TCPListener has set its own default (15 s) already: the listener is
// the caller's, and its settings cannot be read back without as many
// syscalls as setting them.
func (p *Proxy) setKeepAlive(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetKeepAliveConfig(p.keepAlive)
		p.setUserTimeout(tc)
	}
}

// Shutdown stops accepting (it closes every listener given to Serve), stops
// the rebalance rounds, and waits for the live connections to end. If ctx
// ends first, it closes the connections that are left, waits for their
// handlers to return, and returns ctx's error; otherwise it returns nil.
// After Shutdown, Serve and Rebalance return ErrProxyClosed.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.stop() // first, so Serve takes the listeners' close for a shutdown
	p.mu.Lock()
	p.closed = true
	for ln := range p.listeners {
		ln.Close()
	}
	p.mu.Unlock()
	p.ticker.Wait()

	drained := make(chan struct{})
	go func() {
		p.handlers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
		p.kill()
		p.stopLines()
		return nil
	case <-ctx.Done():
	}

	// Dials in flight give up, and from here on connect links nothing
	// (it checks killCtx under mu), so the list taken below is all there is.
	p.kill()
	p.mu.Lock()
	var left []*conn
	for _, u := range slices.Concat(p.upstreams, p.leaving) {
		for c := u.head; c != nil; c = c.next {
			p.endLocked(c, endDrained)
			left = append(left, c)
		}
	}
	p.mu.Unlock()
	for _, c := range left {
		p.closeConn(c)
	}
	p.log.LogAttrs(context.Background(), slog.LevelWarn, "shutdown: stopped waiting; closed the connections left",
		slog.Int("closed", len(left)), slog.Any("err", ctx.Err()))
	<-drained
	p.stopLines()
	return ctx.Err()
}

// every runs round every d until Shutdown, logging its errors as what's.
func (p *Proxy) every(d time.Duration, what string, round func(context.Context) error) {
	defer p.ticker.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-p.stopCtx.Done():
			return
		case <-t.C:
			if err := round(p.stopCtx); err != nil && p.stopCtx.Err() == nil {
				p.log.LogAttrs(p.stopCtx, slog.LevelWarn, what+" failed", slog.Any("err", err))
			}
		}
	}
}
