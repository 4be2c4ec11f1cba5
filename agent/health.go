package agent

import (
	"errors"
	"fmt"
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
