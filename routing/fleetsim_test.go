package routing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// simNode is a node of the fleet simulation: its live routes and its
// history of unused closures.
type simNode struct {
	node routing.Node
	live []routing.Route
	// schedule: overloaded/paused/memory for each half hour.
	overloaded, paused []bool
	memory             []float64
	// unused closures by plan: time, count, sessions at the time.
	unusedAt       []time.Time
	unusedCount    []int
	unusedSessions []int
	lastMove       time.Time // real time of the last move
}

// group is one user's copies of one route key.
type group struct {
	live  int
	inUse bool // a copy moves traffic: the key is in use
}

// fleetSim is the simulated fleet: 200 nodes in 4 countries; 20,000 users
// each holding 1 to 3 copies of a route (same key, nodes of the user's
// country, prices drawn, so some copies are no alternative); a third of the
// copies unused, the others moving traffic every round; nodes overloaded
// and paused at random half hours, memory at 60 to 99 %.
type fleetSim struct {
	rng    *rand.Rand
	nodes  []*simNode
	byID   map[string]*simNode
	ix     routing.Alternatives
	inUse  map[string]bool // route ID → moves traffic
	groups map[[2]string]*group
	// clock is the platform's clock at a real time (nil: real time);
	// repeat, if set, is the share of node plans repeated a second
	// later over the stored state, as after a crash before the
	// actions were carried out.
	clock  func(real time.Time) time.Time
	repeat float64
}

// noReliance is the Index with ReliedOn always zero: the fleet without the
// rule that a move's alternative counts as in use, to show the simulation
// catches its absence.
type noReliance struct{ *routing.Index }

func (noReliance) ReliedOn(routing.Route) time.Time { return time.Time{} }

func newFleetSim(seed uint64, hours int, reliance bool) *fleetSim {
	rng := rand.New(rand.NewPCG(seed, 7))
	s := &fleetSim{rng: rng, byID: map[string]*simNode{}, inUse: map[string]bool{}, groups: map[[2]string]*group{}}
	countries := []string{"DE", "FR", "NL", "SE"}
	for i := range 200 {
		role := routing.RoleExit
		if i%3 == 2 {
			role = routing.RoleEntry
		}
		n := &simNode{node: routing.Node{ID: fmt.Sprintf("n%03d", i), Role: role, Country: countries[i%4], Price: 100}}
		for range 2 * hours {
			n.overloaded = append(n.overloaded, rng.IntN(3) == 0)
			n.paused = append(n.paused, rng.IntN(20) == 0)
			n.memory = append(n.memory, float64(60+rng.IntN(40)))
		}
		s.nodes = append(s.nodes, n)
		s.byID[n.node.ID] = n
	}
	var all []routing.Route
	for u := range 20_000 {
		c := u % 4
		user := fmt.Sprintf("u%05d", u)
		key := fmt.Sprintf("vpn-%s-%d", countries[c], rng.IntN(2))
		g := &group{}
		s.groups[[2]string{user, key}] = g
		// Copies on distinct nodes of the user's country.
		for j, k := range rng.Perm(50)[:1+rng.IntN(3)] {
			n := s.nodes[4*k+c]
			r := routing.Route{ID: fmt.Sprintf("%s-%d", user, j), User: user, Key: key, Node: n.node.ID,
				Country: n.node.Country, Price: pricing.Price(100 + 50*rng.IntN(3)), Kind: routing.KindOwn,
				Start: t0.Add(-6 * time.Hour), LastTraffic: t0.Add(-3 * time.Hour)}
			if rng.IntN(10) == 0 {
				r.Kind = routing.KindPartner
			}
			if rng.IntN(3) != 0 {
				s.inUse[r.ID] = true
				g.inUse = true
			}
			g.live++
			n.live = append(n.live, r)
			all = append(all, r)
		}
	}
	ix := routing.NewIndex(all)
	s.ix = ix
	if !reliance {
		s.ix = noReliance{ix}
	}
	return s
}

// round plans every node at now, in random order, and carries out each
// plan; it returns the first broken invariant. now is real time; the
// plans and the traffic are stamped by s.clock.
func (s *fleetSim) round(pol routing.Policy, now time.Time) error {
	label := now
	if s.clock != nil {
		label = s.clock(now)
	}
	half := int(now.Sub(t0) / (30 * time.Minute))
	for _, n := range s.nodes {
		n.node.OverloadedSince = time.Time{}
		if n.overloaded[half] {
			// The overload started at the first of its run of half hours.
			h := half
			for h > 0 && n.overloaded[h-1] {
				h--
			}
			n.node.OverloadedSince = t0.Add(time.Duration(h) * 30 * time.Minute)
		} else if half > 0 && n.overloaded[half-1] {
			n.node.OverloadEnded = t0.Add(time.Duration(half) * 30 * time.Minute)
		}
		n.node.Paused = n.paused[half]
		n.node.MemoryPercent = n.memory[half]
		for i := range n.live {
			if s.inUse[n.live[i].ID] {
				n.live[i].LastTraffic = label
			}
		}
	}
	for _, i := range s.rng.Perm(len(s.nodes)) {
		n := s.nodes[i]
		p, err := pol.Plan(label, n.node, n.live, s.ix)
		if err != nil {
			return err
		}
		n.node.State = p.State
		actions := p.Actions
		if s.repeat > 0 && s.rng.Float64() < s.repeat {
			again, err := pol.Plan(label.Add(time.Second), n.node, n.live, s.ix)
			if err != nil {
				return err
			}
			n.node.State = again.State
			for _, a := range again.Actions {
				if !slices.ContainsFunc(actions, func(b routing.Action) bool { return b.Route.ID == a.Route.ID }) {
					actions = append(slices.Clip(actions), a)
				}
			}
		}
		unused := 0
		for _, a := range actions {
			n.live = slices.DeleteFunc(n.live, func(r routing.Route) bool { return r.ID == a.Route.ID })
			g := s.groups[[2]string{a.Route.User, a.Route.Key}]
			g.live--
			if s.inUse[a.Route.ID] {
				delete(s.inUse, a.Route.ID)
				if a.Reason == routing.ReasonMove {
					// The user goes on through the route kept.
					s.inUse[a.Keeps.ID] = true
				}
			}
			if a.Reason == routing.ReasonMove {
				if !n.lastMove.IsZero() && now.Sub(n.lastMove) < 5*time.Minute {
					return fmt.Errorf("%v: node %s moved %s %v after its previous move", now.Sub(t0), n.node.ID, a.Route.ID, now.Sub(n.lastMove))
				}
				n.lastMove = now
			}
			if g.live == 0 && g.inUse {
				return fmt.Errorf("%v: node %s closed %s (%s), user %s's last copy of %s, a route in use",
					now.Sub(t0), n.node.ID, a.Route.ID, a.Reason, a.Route.User, a.Route.Key)
			}
			if a.Reason == routing.ReasonUnused {
				unused++
			}
		}
		if unused > 0 {
			n.unusedAt = append(n.unusedAt, now)
			n.unusedCount = append(n.unusedCount, unused)
			n.unusedSessions = append(n.unusedSessions, len(n.live)+len(actions))
		}
		if err := n.checkPace(now); err != nil {
			return err
		}
	}
	return nil
}

// checkPace checks rule 1 on the node's unused closures up to now: within
// 5 minutes at most ceil(5 % × sessions / 12) + 1, within an hour at most
// 5 % of the sessions + 10 %, plus one (the sessions being the most the
// node held in that hour).
func (n *simNode) checkPace(now time.Time) error {
	five, hour, most := 0, 0, 0
	for i := len(n.unusedAt) - 1; i >= 0 && now.Sub(n.unusedAt[i]) < time.Hour; i-- {
		hour += n.unusedCount[i]
		most = max(most, n.unusedSessions[i])
		if now.Sub(n.unusedAt[i]) < 5*time.Minute {
			five += n.unusedCount[i]
		}
	}
	if len(n.unusedAt) == 0 || !n.unusedAt[len(n.unusedAt)-1].Equal(now) {
		return nil
	}
	sessions := n.unusedSessions[len(n.unusedSessions)-1]
	if few := int(math.Ceil(0.05*float64(sessions)/12-1e-9)) + 1; five > few {
		return fmt.Errorf("%v: node %s closed %d unused routes within 5 minutes, more than %d", now.Sub(t0), n.node.ID, five, few)
	}
	if float64(hour) > 1.1*0.05*float64(most)+1 {
		return fmt.Errorf("%v: node %s closed %d unused routes within an hour, more than 5 %% of %d sessions +10 %% +1",
			now.Sub(t0), n.node.ID, hour, most)
	}
	return nil
}

func (s *fleetSim) run(pol routing.Policy, every time.Duration, hours int) error {
	for now := t0; now.Before(t0.Add(time.Duration(hours) * time.Hour)); now = now.Add(every) {
		if err := s.round(pol, now); err != nil {
			return err
		}
	}
	return nil
}

// TestFleetSimulation is the fleet simulation over 24 hours, a round
// every 5 minutes (the move rule's own interval, so every node may move a
// route each round; 288 rounds keep the test to seconds under -race). No
// user loses every copy of a route key in use, and no node closes unused
// routes faster than rule 1 allows.
func TestFleetSimulation(t *testing.T) {
	s := newFleetSim(1, 24, true)
	if err := s.run(routing.Policy{}, 5*time.Minute, 24); err != nil {
		t.Fatal(err)
	}
	var unused, moves, live int
	for _, n := range s.nodes {
		for _, c := range n.unusedCount {
			unused += c
		}
		live += len(n.live)
		if !n.node.State.LastMove.IsZero() {
			moves++
		}
	}
	t.Logf("24 h: %d unused routes closed, %d nodes moved routes, %d routes live of about 40,000", unused, moves, live)
	if unused == 0 || moves == 0 {
		t.Errorf("the simulation closed %d unused routes and %d nodes moved routes; want both", unused, moves)
	}
}

// The same fleet planned every 30 seconds for three hours, with the
// platform's clock stepping back 40 seconds at 0:50 and 10 more minutes at
// 1:40, and one node plan in fifty repeated a second later over the
// stored state, as after a crash before its actions were carried out. The
// invariants hold in real time.
func TestFleetSimulationClockStepsAndRepeats(t *testing.T) {
	s := newFleetSim(2, 3, true)
	s.repeat = 0.02
	s.clock = func(real time.Time) time.Time {
		switch d := real.Sub(t0); {
		case d < 50*time.Minute:
			return real
		case d < 100*time.Minute:
			return real.Add(-40 * time.Second)
		}
		return real.Add(-10*time.Minute - 40*time.Second)
	}
	if err := s.run(routing.Policy{}, 30*time.Second, 3); err != nil {
		t.Fatal(err)
	}
	var unused, moved int
	for _, n := range s.nodes {
		for _, c := range n.unusedCount {
			unused += c
		}
		if !n.lastMove.IsZero() {
			moved++
		}
	}
	t.Logf("3 h: %d unused routes closed, %d nodes moved routes", unused, moved)
	if unused == 0 || moved == 0 {
		t.Errorf("the simulation closed %d unused routes and %d nodes moved routes; want both", unused, moved)
	}
}

// Without the rule that a move's alternative counts as in use, the same
// fleet loses users' routes in use: the simulation has teeth.
func TestFleetSimulationCatchesClosingWhatAMoveReliesOn(t *testing.T) {
	s := newFleetSim(1, 24, false)
	err := s.run(routing.Policy{}, 5*time.Minute, 24)
	if err == nil {
		t.Fatal("the fleet without reliance lost no route in use")
	}
	t.Logf("without reliance: %v", err)
}
