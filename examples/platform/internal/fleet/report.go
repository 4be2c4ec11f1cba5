package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/routing"
)

// Report takes reading r of the node it names and plans the node: a
// reading the node's tracker already counted returns ErrDuplicate and
// an older one ErrStale, with the node's name and state; both change
// nothing. The outcome is logged once the store has kept it, before
// the routes its plan closed (reportRun.Kept), and the notifier woken
// for what it sent: only for a node with a receiver (a
// wake costs the PostgreSQL store a claim, a statement and a commit,
// which for an undeliverable notice finds nothing).
func (f *Fleet) Report(ctx context.Context, r overload.Reading) (ReportOutcome, error) {
	if err := store.CheckNodeID(r.Node); err != nil {
		return ReportOutcome{}, fmt.Errorf("report: %w", err)
	}
	run := &reportRun{f: f, r: r, out: ReportOutcome{Node: r.Node}}
	notice, err := f.Store.Report(ctx, r.Node, run)
	switch {
	case errors.Is(err, store.ErrDuplicate) || errors.Is(err, store.ErrStale):
		return run.out, err
	case err != nil:
		// run is not read: a batch the request stopped waiting for may
		// still be taking it.
		return ReportOutcome{}, err
	}
	out, first, planErr := run.out, run.first, run.planErr
	out.Notice = notice
	if planErr != nil {
		f.Log.Error("plan round", "node", r.Node, "err", planErr)
	}
	if first {
		f.Log.Warn("reports from a node the route table does not hold: tracked, not admitted until it is, never planned",
			"node", r.Node)
	}
	if f.Dispatch != nil && (out.Notice != nil || (out.Event != nil && out.Event.Kind == overload.End && f.Dispatch.SendsEnds())) &&
		f.Dispatch.Receivers().ForNode(r.Node) != nil {
		f.Dispatch.Poke()
	}
	return out, nil
}

// reportRun is one report's take and plan (store.ReportRun), allocated
// once a report. The store may take the reading and plan the node more
// than once (on its copy, then on its row; a transaction run again):
// each Take starts the run afresh, and the plan's error is logged once,
// that of the run the store kept.
type reportRun struct {
	f       *Fleet
	r       overload.Reading
	out     ReportOutcome
	at      time.Time
	first   bool // the first reading counted of a node the route table does not hold
	planErr error
}

func (run *reportRun) Take(n *store.Node, now time.Time) error {
	run.first = n.Info.Role == 0 && n.Readings == 0
	run.planErr = nil
	var err error
	run.out, err = run.f.Take(n, run.r, now)
	n.Event, n.Notice, run.at = run.out.Event, run.out.Notice, now
	return err
}

func (run *reportRun) Plan(n *store.Node, now time.Time, tx store.NodeTx) (err error) {
	run.planErr, err = run.f.plan(n, now, tx)
	return err
}

// Kept logs what the reading started or ended, and its notice, once the
// store has kept them, before the store logs the routes the plan closed.
func (run *reportRun) Kept(notice *overload.Notice) {
	out := run.out
	out.Notice = notice
	run.f.logOutcome(run.r, out, run.at)
}

// PlanNode plans node n at now and carries the plan out in n (plan),
// for the store to write; a plan that fails is logged, and leaves n as
// it was.
func (f *Fleet) PlanNode(n *store.Node, now time.Time, tx store.NodeTx) error {
	planErr, err := f.plan(n, now, tx)
	if planErr != nil {
		f.Log.Error("plan round", "node", n.Info.ID, "err", planErr)
	}
	return err
}

// plan plans node n at now and carries the plan out in n (planOne):
// planErr is the plan's own failure, which changes nothing; err the
// store's (tx), which fails the node's write. A node whose plan can
// change nothing but its budgets' dates (quiet) is planned without its
// routes, which the PostgreSQL store then need not read.
func (f *Fleet) plan(n *store.Node, now time.Time, tx store.NodeTx) (planErr, err error) {
	if n.Info.Role == 0 {
		return nil, nil
	}
	var alts routing.Alternatives
	if !f.Quiet(n, now) {
		if alts, err = tx.Alternatives(n, now); err != nil {
			return nil, err
		}
	}
	_, planErr = f.planOne(now, n, alts)
	if err := tx.Failed(); err != nil {
		return nil, err
	}
	return planErr, nil
}

// PlanRound plans every node whose plan is due.
func (f *Fleet) PlanRound(ctx context.Context) error { return f.Store.PlanDue(ctx, f.PlanNode) }

// maxAhead is how far ahead of the platform's clock a version 1 reading
// may be taken. Version 1 readings are ordered by time, so one from the
// future, counted, would make every honest reading after it "out of
// order" until the clock caught up. Version 2 readings are ordered by
// their run and seq, so a node whose clock stepped ahead loses nothing;
// for them only overload's own bound (Reading.ValidateAt) applies.
const maxAhead = 5 * time.Minute

// ReportOutcome is what one reading did.
type ReportOutcome struct {
	Node       string           `json:"node"`
	Overloaded bool             `json:"overloaded"`
	Event      *overload.Event  `json:"event,omitempty"`
	Notice     *overload.Notice `json:"notice,omitempty"`
}

// Take is a report's first step on node n, locked by the store: the
// tracker observes reading r, taken at now by the platform's clock, and
// n is dated by it; the outcome is logged once the store kept it
// (reportRun.Kept), not here. The error of a duplicate or older reading wraps
// store.ErrDuplicate or store.ErrStale.
func (c *Fleet) Take(n *store.Node, r overload.Reading, now time.Time) (ReportOutcome, error) {
	if r.Run == "" && r.At.After(now.Add(maxAhead)) {
		return ReportOutcome{}, fmt.Errorf("report of %s: taken at %s, more than %v ahead of the platform's clock: %w",
			r.Node, r.At.Format(time.RFC3339), maxAhead, store.ErrBadInput)
	}
	if err := r.ValidateAt(now); err != nil {
		return ReportOutcome{}, fmt.Errorf("report of %s: %w: %w", r.Node, store.ErrBadInput, err)
	}
	res, err := n.Tracker.Observe(r)
	switch {
	case errors.Is(err, overload.ErrDuplicate):
		return ReportOutcome{Node: r.Node, Overloaded: n.Tracker.Overloaded()}, fmt.Errorf("report of %s at %s: %w", r.Node, r.At.Format(time.RFC3339Nano), store.ErrDuplicate)
	case errors.Is(err, overload.ErrOutOfOrder):
		return ReportOutcome{Node: r.Node, Overloaded: n.Tracker.Overloaded()}, fmt.Errorf("report of %s at %s: %w", r.Node, r.At.Format(time.RFC3339Nano), store.ErrStale)
	case err != nil:
		return ReportOutcome{}, fmt.Errorf("report of %s: %w: %w", r.Node, store.ErrBadInput, err)
	}
	n.Readings++
	if res.Event != nil {
		n.EventsSeen++
	}
	// routing's own adapter: overload start and end from the tracker, and
	// memory from this reading (0 when the reading lacks it, so a stale
	// figure never counts as above the move threshold).
	ended := n.Info.OverloadEnded
	n.Info.SetOverload(n.Tracker, r)
	platformClock(n, res.Event, ended, now, c.Config.Policy.WithDefaults())
	return ReportOutcome{Node: r.Node, Overloaded: res.Overloaded, Event: res.Event, Notice: res.Notice}, nil
}

// logOutcome logs what a reading taken at now started or ended, and its
// notice.
func (c *Fleet) logOutcome(r overload.Reading, out ReportOutcome, now time.Time) {
	if ev := out.Event; ev != nil {
		switch ev.Kind {
		case overload.Start:
			c.Log.Warn("overload started", "node", r.Node, "at", now, "reading_at", ev.At, "findings", overload.Texts(ev.Findings))
		case overload.End:
			c.Log.Info("overload ended", "node", r.Node, "at", now, "reading_at", ev.At, "lasted", ev.Lasted,
				"offered_again", c.Config.Policy.OfferedAgain(now))
		}
	}
	if out.Notice != nil {
		c.Log.Warn("notice", "node", r.Node, "text", out.Notice.Text)
	}
}

// platformClock dates the overload's start and end by the platform's
// clock, when it received the readings, so the move delay and the
// cool-down run on one clock whatever the node's says: an agent whose
// clock is behind starts no move early and shortens no cool-down. The
// readings' own times still order them and are shown beside. A start
// is dated no earlier than the last end, and an end no earlier than its
// start, whichever replica's clock reads now (clock.go).
//
// A start or an end dated further ahead of now than the rule that runs
// from it lasts (the move delay, the cool-down; and store.ClockSlack)
// was dated by a clock that has since stepped back: it is dated now
// instead. Left as it was, it would put off the moves, or keep the node
// from new connections, for as long as the step, an hour for a clock an
// hour ahead; dated now, the rule runs its full length from now on:
// never shorter than it would have without the step, at most its own
// length longer. Replicas whose clocks are apart by less than that
// leave each other's dates alone.
func platformClock(n *store.Node, ev *overload.Event, ended, now time.Time, pol routing.Policy) {
	if pol.CoolDown > 0 && !ended.IsZero() && store.SteppedBack(ended, now, pol.CoolDown) {
		ended = now
	}
	if !n.StartedAt.IsZero() && store.SteppedBack(n.StartedAt, now, pol.MoveAfter) {
		n.StartedAt = now
	}
	n.Info.OverloadEnded = ended
	if ev != nil {
		switch ev.Kind {
		case overload.Start:
			n.StartedAt = laterOf(now, ended)
		case overload.End:
			n.StartedAt, n.Info.OverloadEnded = time.Time{}, laterOf(now, n.StartedAt)
		}
	}
	n.Info.OverloadedSince = time.Time{}
	if n.Tracker.Overloaded() {
		n.Info.OverloadedSince = n.StartedAt
		if n.StartedAt.IsZero() { // state kept before the platform dated starts
			n.Info.OverloadedSince = n.Tracker.Since()
		}
	}
}

// planOne plans node n at now and carries out the plan in n: its closed
// routes leave n.Routes for n.Closing, their sessions end, the routes
// its moves rely on go into n.Relied, and n's budgets move on;
// n.Replanned says whether n changed in a way worth saving (a round that
// changed only the plan time is not: the budgets, which pace moves and
// closures, are what the next plan needs). An unregistered node is not
// planned.
func (c *Fleet) planOne(now time.Time, n *store.Node, alts routing.Alternatives) (routing.Plan, error) {
	if n.Info.Role == 0 {
		return routing.Plan{}, nil
	}
	routes := c.AppendPricedRoutes(make([]routing.Route, 0, len(n.Routes)), n, now)
	plan, err := c.Config.Policy.Plan(now, n.Info, routes, alts)
	if err != nil {
		return routing.Plan{}, err
	}
	budgetsChanged := !sameBudgets(n.Info.State, plan.State)
	n.Info.State = plan.State
	for _, a := range plan.Actions {
		rt := n.Routes[a.Route.ID]
		delete(n.Routes, a.Route.ID)
		rt.Session.End = now
		cr := store.ClosedRoute{Action: a, At: now, Earned: rt.Earned, Session: rt.Session}
		n.Closed = store.AppendBounded(n.Closed, cr, store.MaxClosed)
		n.Closing = append(n.Closing, cr)
		if keeps, ok := store.ReliesOn(a); ok {
			n.Relied = append(n.Relied, keeps)
		}
	}
	if len(plan.Actions) > 0 {
		n.LastPlan = &plan
		n.Info.LiveUsers = store.LiveUsers(n)
	}
	n.Replanned = n.Replanned || len(plan.Actions) > 0 || budgetsChanged
	return plan, nil
}

// sameBudgets reports whether two plan states hold the same budgets; the
// plan time alone is not worth a write: the budgets, which pace moves and
// closures, are what the next plan needs. The period between plans is
// not worth one either: a stale stored period only bounds how far the
// pace may fall behind after a restart.
func sameBudgets(a, b routing.NodeState) bool {
	a.PlannedAt, b.PlannedAt = time.Time{}, time.Time{}
	a.Period, b.Period = 0, 0
	return a.Equal(b)
}
