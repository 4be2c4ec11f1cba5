package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/proofkit/nodekit/overload"
)

// noteStep records what one evaluated reading left for the page and the
// health handlers: the reading's figures in the hour's history, the notice
// it produced, and whether its state was saved.
func (a *Agent) noteStep(r overload.Reading, res overload.Result, saveErr error) {
	a.hist.add(r, res, time.Now())
	a.hmu.Lock()
	defer a.hmu.Unlock()
	a.saveErr = saveErr
	if res.Notice != nil {
		n := *res.Notice
		a.lastNotice = &n
	}
}

// Ready returns nil once the agent is ready to serve its node: the first
// reading was taken and evaluated, and the latest write of its state
// succeeded (or it keeps its state in memory). Otherwise the error says
// what is missing. /readyz answers 200 or 503 with it.
func (a *Agent) Ready() error {
	if a.hist.latest() == nil {
		return errors.New("no reading taken yet")
	}
	a.hmu.Lock()
	defer a.hmu.Unlock()
	if a.saveErr != nil {
		return fmt.Errorf("state not writable: %w", a.saveErr)
	}
	return nil
}

// Healthy returns nil while the agent's reading loop runs: while the
// latest reading is at most three intervals old, and before the first one
// for three intervals after Run started (or until Run starts). Otherwise
// (the probe hangs or every reading fails) the error says since when. /healthz answers 200 or 503 with it; a container's HEALTHCHECK and
// a supervisor restart an agent that stays unhealthy.
func (a *Agent) Healthy() error {
	return a.healthyAt(time.Now())
}

func (a *Agent) healthyAt(now time.Time) error {
	last := a.hist.latest()
	if last == nil {
		a.hmu.Lock()
		started := a.started
		a.hmu.Unlock()
		if age := now.Sub(started); !started.IsZero() && age > 3*a.interval {
			return fmt.Errorf("no reading evaluated in the %v since the agent started (interval %v)", age.Round(time.Second), a.interval)
		}
		return nil
	}
	if age := now.Sub(last.taken); age > 3*a.interval {
		return fmt.Errorf("no reading evaluated for %v (interval %v)", age.Round(time.Second), a.interval)
	}
	return nil
}

// missingInputs says in the log when a reading's inputs go missing and
// come back: a check whose input is missing counts as not passed, so an
// input the probe cannot measure (a -proc file turned to garbage, a link
// whose speed is unknown) must not go unsaid at the default log level.
type missingInputs struct {
	mu     sync.Mutex
	seen   bool             // a reading was seen by this process
	warned []overload.Input // said to be missing, not yet back: the previous reading's
}

// log warns of the inputs r misses that the previous reading did not
// (at the second reading, of every one it misses: a first reading has no
// deltas, so it misses the counters' inputs whatever the node), with r's
// notes, and says which of those warned about r measures again.
func (m *missingInputs) log(log *slog.Logger, r overload.Reading) {
	m.mu.Lock()
	var gone, back []overload.Input
	if m.seen {
		for _, in := range r.Missing {
			if !slices.Contains(m.warned, in) {
				gone = append(gone, in)
			}
		}
		for _, in := range m.warned {
			if !slices.Contains(r.Missing, in) {
				back = append(back, in)
			}
		}
		slices.Sort(back)
		back = slices.Compact(back) // as a set: Missing may name an input twice
		m.warned = slices.Clone(r.Missing)
	}
	m.seen = true
	m.mu.Unlock()
	if len(gone) > 0 {
		log.Warn("inputs could not be measured; their checks count as not passed", "missing", gone, "notes", r.Notes)
	}
	if len(back) > 0 {
		log.Info("inputs measured again", "inputs", back)
	}
}
