package pinproxy

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"
)

// SetUpstreams replaces the list of upstreams, as a reload does; the list
// is checked as Config.Upstreams is, and a bad list leaves the old one in
// place. Upstreams in both lists keep their connections and counters;
// added ones take new clients at once (least-used order sends new clients
// to them first); removed ones take no new clients, and their live
// connections stay until they close, or, Config.DrainRemoved after the
// removal, are moved one per rebalance round. The new order is the new order of preference.
func (p *Proxy) SetUpstreams(addrs []string) error {
	if err := checkUpstreams(addrs); err != nil {
		return err
	}
	var added, removed []string
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrProxyClosed
	}
	old := make(map[string]*upstream, len(p.upstreams)+len(p.leaving))
	for _, u := range slices.Concat(p.leaving, p.upstreams) {
		old[u.addr] = u
	}
	next := make([]*upstream, len(addrs))
	for i, addr := range addrs {
		u := old[addr]
		if u == nil {
			u = &upstream{addr: addr}
			added = append(added, addr)
		}
		u.removed = false
		delete(old, addr)
		next[i] = u
	}
	p.leaving = p.leaving[:0]
	for _, u := range old {
		if !u.removed {
			removed = append(removed, u.addr)
		}
		if !u.removed {
			u.removedAt = p.clock()
		}
		u.removed = true
		if u.load() > 0 {
			p.leaving = append(p.leaving, u)
		}
	}
	slices.SortFunc(p.leaving, func(a, b *upstream) int { return strings.Compare(a.addr, b.addr) })
	p.upstreams = next
	p.gen++
	serving := p.tickerStarted
	if serving {
		p.ticker.Add(1)
	}
	p.mu.Unlock()
	slices.Sort(removed)
	p.log.LogAttrs(p.stopCtx, slog.LevelInfo, "upstreams set",
		slog.String("upstreams", strings.Join(addrs, ",")),
		slog.String("added", strings.Join(added, ",")), slog.String("removed", strings.Join(removed, ",")))
	if serving {
		go p.warnDuplicates(addrs)
	}
	return nil
}

// drainRemoved moves one connection off a removed upstream whose
// Config.DrainRemoved has passed (the first by address, its newest
// connection) once an upstream in the list answers a test-connect: the
// one its client's redial would go to. As a round's move, it closes the
// connection no sooner than probeGap after that test-connect ended, and
// the health checks leave that upstream out while the redial is due
// (probe.go). A rebalance round calls it, under rebalanceMu, and counts
// the redial on its way to the upstream it returns, if it moved one.
func (p *Proxy) drainRemoved(ctx context.Context) (to *upstream) {
	if p.cfg.DrainRemoved <= 0 {
		return nil
	}
	var d drain
	for !p.drainOne(ctx, &d) {
	}
	return d.movedTo
}

// drain is what drainOne leaves for its next call.
type drain struct {
	answering *upstream // the upstream whose test-connect answered
	movedTo   *upstream // where the moved connection's redial goes
}

// drainOne is drainRemoved's work. It reports false when it waited for
// another test-connect to the upstream it would test, or for probeGap
// after its own answered (probe.go): what it picked is to be picked
// again, and d.answering is the upstream that answered, if any.
func (p *Proxy) drainOne(ctx context.Context, d *drain) (done bool) {
	now := p.clock()
	p.mu.Lock()
	var from *upstream
	for _, u := range p.leaving {
		if u.tail != nil && now.Sub(u.removedAt) >= p.cfg.DrainRemoved {
			from = u
			break
		}
	}
	if from == nil || p.closed {
		p.mu.Unlock()
		return true
	}
	var small [1]uint64
	tried := small[:]
	if n := len(p.upstreams); n > 64 {
		tried = make([]uint64, (n+63)/64)
	}
	_, to := p.pickLocked(tried, now)
	if to == nil {
		p.mu.Unlock()
		return true
	}
	if d.answering == to && to.sessions.refusedRecently() { // a client's session to it was refused meanwhile
		p.mu.Unlock()
		p.log.LogAttrs(ctx, slog.LevelInfo, "drain: upstream does not answer; nothing moved",
			slog.String("from", from.addr), slog.String("to", to.addr), slog.String("err", to.sessions.refusing))
		return true
	}
	if waited, err := p.awaitProbeLocked(ctx, to); waited || err != nil {
		p.mu.Unlock()
		return err != nil
	}
	if d.answering != to {
		hold := p.holdTestLocked(to)
		to.startProbeLocked()
		to.dials++
		p.mu.Unlock()

		t := p.testConnect(ctx, to, p.cfg.DialTimeout, hold, localTestConnect, slog.String("to", to.addr))
		p.mu.Lock()
		to.endProbeLocked(t)
		if t.out != answered {
			if t.out == refused {
				p.testedLocked(to, t, false)
			}
			p.mu.Unlock()
			if t.out != refused {
				return true
			}
			p.log.LogAttrs(ctx, slog.LevelInfo, "drain: upstream does not answer; nothing moved",
				slog.String("from", from.addr), slog.String("to", to.addr), slog.Any("err", t.err))
			return true
		}
		p.testedLocked(to, t, false)
		d.answering = to
		// The test-connect's session just ended: the node may not have
		// let go of it yet, and the client may redial at once.
		if waited, err := p.awaitProbeLocked(ctx, to); waited || err != nil {
			p.mu.Unlock()
			return err != nil
		}
	}
	c := from.tail
	if c == nil || p.closed {
		p.mu.Unlock()
		return true
	}
	p.moveLocked(c, to, endDrained)
	d.movedTo = to
	p.mu.Unlock()
	p.closeConn(c)
	p.log.LogAttrs(ctx, slog.LevelInfo, "removed upstream; moving a connection",
		slog.String("from", from.addr), slog.String("to", to.addr))
	return true
}

// warnDuplicates resolves addrs and warns about any two that resolve to
// the same address (127.0.0.1:P and localhost:P): the proxy would count
// them as two nodes. Each lookup is bounded by the dial timeout.
func (p *Proxy) warnDuplicates(addrs []string) {
	defer p.ticker.Done()
	seen := make(map[string]string)
	for _, addr := range addrs {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(p.stopCtx, min(p.cfg.DialTimeout, 5*time.Second))
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		cancel()
		if err != nil {
			continue // a dial will say so
		}
		for _, ip := range ips {
			key := net.JoinHostPort(ip, port)
			if first, dup := seen[key]; dup && first != addr {
				p.log.LogAttrs(p.stopCtx, slog.LevelWarn, "two upstreams resolve to the same address; they count as two nodes",
					slog.String("upstream", addr), slog.String("also", first), slog.String("address", key))
				break
			}
			seen[key] = addr
		}
	}
}

// upstreamAddrsLocked returns the current list's addresses.
func (p *Proxy) upstreamAddrsLocked() []string {
	out := make([]string, len(p.upstreams))
	for i, u := range p.upstreams {
		out[i] = u.addr
	}
	return out
}
