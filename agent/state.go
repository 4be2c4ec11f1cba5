package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/proofkit/nodekit/internal/atomicfile"
	"github.com/proofkit/nodekit/internal/procfile"
	"github.com/proofkit/nodekit/overload"
)

// maxClockSkew is how far ahead of the clock a saved state's latest
// reading may be before the state is set aside.
const maxClockSkew = time.Minute

// stateFile is the name of the agent's state in the state directory.
const stateFile = "state.json"

// maxStateFile bounds the state file read at start. What the agent writes
// is far smaller: a tracker's 100 events and a reading of 1,024 listeners
// come to well under 1 MiB.
const maxStateFile = 16 << 20

// savedState is what state.json holds: the tracker's state (windows,
// overload start, last notice, events) and the latest reading, so a
// restart neither forgets an overload nor sends a second notice within
// the hour; and the run id, the latest seq and its at, so the readings of
// a restarted agent go on in the same run (see overload.ReadingVersion).
// A state without a run (saved by an agent before version 2 readings)
// keeps its tracker and starts a run.
type savedState struct {
	Version int               `json:"v"`
	Node    string            `json:"node"`
	Tracker json.RawMessage   `json:"tracker"`
	Last    *overload.Reading `json:"last,omitempty"`
	Run     string            `json:"run,omitempty"`
	Seq     uint64            `json:"seq,omitempty"`
	At      time.Time         `json:"at,omitzero"`
}

// maxSavedSeq bounds a saved seq: 2^53, the largest integer every JSON
// reader of the platform's side keeps exactly; an agent reading every
// second reaches it in 285 million years.
const maxSavedSeq = 1 << 53

// checkRun says what is wrong with the run and seq of a state that
// otherwise reads (a file edited, or written by something else): with
// them every reading would be refused as invalid, by the agent's own
// tracker and by the platform, for as long as the state lasts.
func (s savedState) checkRun() error {
	switch {
	case s.Run == "" && s.Seq != 0:
		return fmt.Errorf("seq %d without a run", s.Seq)
	case s.Run == "":
		return nil
	case len(s.Run) > 64 || strings.IndexFunc(s.Run, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_')
	}) >= 0:
		return fmt.Errorf("run %.80q: want 1 to 64 letters, digits, '-' or '_'", s.Run)
	case s.Seq >= maxSavedSeq:
		return fmt.Errorf("seq %d: want less than 2^53", s.Seq)
	}
	return nil
}

// newRun returns a fresh run id: 32 hex digits from crypto/rand.
func newRun() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand.Read)
	return hex.EncodeToString(b[:])
}

// checkStateDir checks that a file can be written and renamed in dir,
// which New has created.
func checkStateDir(dir string) error {
	probe := filepath.Join(dir, ".write-check")
	if err := atomicfile.WriteFile(probe, nil, 0o600); err != nil {
		return fmt.Errorf("not writable: %w", err)
	}
	if err := os.Remove(probe); err != nil {
		return err
	}
	return nil
}

// restore returns the tracker a previous run saved, or a new one when
// there is none, it is another node's, or it cannot be read (then the bad
// file is kept beside as state.json.bad and the agent starts afresh). It
// sets the agent's run, seq and last at: those saved with the tracker, or
// a new run when the agent starts afresh.
func (a *Agent) restore() *overload.Tracker {
	a.run, a.seq, a.lastAt = newRun(), 0, time.Time{}
	fresh := overload.NewTracker(a.node, a.limits)
	if a.state == "" {
		return fresh
	}
	_ = atomicfile.RemoveTemps(a.state) // left by a crash during a save
	// As the probe reads /proc: a FIFO in its place (reading one blocks
	// until something writes) or a file of any size is an error at once,
	// and the file is set aside as below.
	b, _, err := procfile.Read(context.Background(), a.state, maxStateFile)
	if errors.Is(err, os.ErrNotExist) {
		return fresh
	}
	var s savedState
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	var t *overload.Tracker
	if err == nil && s.Version != 1 {
		err = fmt.Errorf("version %d, want 1", s.Version)
	}
	if err == nil {
		t, err = overload.RestoreTracker(s.Tracker, a.limits)
	}
	if err == nil {
		if err = s.checkRun(); err != nil && t.Node() == a.node {
			// The tracker reads: keep its last notice ("at most one an
			// hour"), as for a state from the future below.
			notice := t.LastNotice()
			if now := a.now(); notice.After(now) {
				notice = now
			}
			fresh.RecordNotice(notice)
		}
	}
	if err != nil {
		bad := a.state + ".bad"
		_ = os.Rename(a.state, bad)
		a.log.Error("could not read saved state; starting afresh", "err", err, "kept_as", bad)
		return fresh
	}
	if s.Node != a.node || t.Node() != a.node {
		a.log.Warn("saved state is of another node; starting afresh", "saved_node", s.Node, "node", a.node)
		return fresh
	}
	// A state whose latest reading is ahead of the clock (the clock was
	// wrong, then corrected) would make the tracker refuse every reading
	// as out of order until the clock caught up: start afresh instead,
	// but keep the last notice, so no second one goes out within the hour
	// ("at most one an hour"). A notice from the future counts as sent
	// just now.
	// The saved at counts as much: the next reading is dated after it.
	if now := a.now(); t.LastReading().After(now.Add(maxClockSkew)) || s.At.After(now.Add(maxClockSkew)) {
		notice := t.LastNotice()
		if notice.After(now) {
			notice = now
		}
		fresh.RecordNotice(notice)
		a.log.Warn("saved state is from the future (the clock went back?); starting afresh, keeping the last notice",
			"saved_last_reading", t.LastReading(), "saved_at", s.At, "saved_last_notice", t.LastNotice(), "last_notice", fresh.LastNotice(), "now", now)
		return fresh
	}
	a.last = s.Last
	if s.Run != "" {
		a.run, a.seq, a.lastAt, a.runOnDisk = s.Run, s.Seq, s.At, true
	} else { // saved before version 2: a new run, dated after the last reading
		a.lastAt = t.LastReading()
	}
	a.m.overloaded.Set(b2f(t.Overloaded()))
	if t.Overloaded() {
		a.m.overloadedSince.Set(float64(t.Since().Unix()))
		a.log.Warn("restored state: node is overloaded", "since", t.Since(),
			"findings", overload.Texts(t.Findings()), "last_notice", t.LastNotice())
	} else {
		a.log.Info("restored state", "last_reading", t.LastReading(), "events", len(t.Events()))
	}
	return t
}

// Save writes the agent's state to StateDir atomically (temp file, fsync,
// rename). Run saves after every reading and when it stops.
func (a *Agent) Save() error {
	return a.save(a.holdStateDir())
}

// save writes the state unless held, what holdStateDir said before it, is
// an error.
func (a *Agent) save(held error) error {
	if a.state == "" {
		return nil
	}
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.mu.Lock()
	tj, err := json.Marshal(a.tracker)
	s := savedState{Version: 1, Node: a.node, Tracker: tj, Last: a.last, Run: a.run, Seq: a.seq, At: a.lastAt}
	a.mu.Unlock()
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if held != nil {
		return fmt.Errorf("save state: %w", held)
	}
	if err := atomicfile.WriteFile(a.state, b, 0o600); err != nil {
		return fmt.Errorf("save state to %s: %w", a.state, err)
	}
	a.mu.Lock()
	if a.run == s.Run {
		a.runOnDisk = true
	}
	a.mu.Unlock()
	return nil
}

// holdStateDir checks, before the state or the queue is written, that
// the state directory is still the one this agent locked. One removed
// is made again (remakeStateDir). One whose lock file another agent holds
// now (it was removed, and another agent started on its path) is that
// agent's: from then on this agent keeps its queue in memory and writes
// no state, and the error says so.
func (a *Agent) holdStateDir() error {
	if a.state == "" {
		return nil
	}
	if err := a.stateTaken.Load(); err != nil {
		return *err
	}
	a.lockMu.Lock()
	lock := a.lock
	a.lockMu.Unlock()
	if lock == nil {
		return nil // closed: nothing to compare
	}
	dir := filepath.Dir(a.state)
	gone, taken, pid, err := lockStill(lock, dir)
	switch {
	case err != nil:
		return nil // cannot tell: the write says what is wrong
	case gone:
		a.remakeStateDir()
		return nil
	case !taken:
		return nil
	}
	terr := fmt.Errorf("state directory %s was removed and is another agent's now (pid %d); this agent's state and queue stay in memory: stop it", dir, pid)
	if a.stateTaken.CompareAndSwap(nil, &terr) {
		if a.q != nil {
			a.q.detach()
		}
		a.log.Error("the state directory was removed and another agent has locked it since; nothing more is written there: stop this agent",
			"dir", dir, "pid", pid)
	}
	return terr
}

// remakeStateDir makes the state directory again when it was removed
// while the agent ran (rm -rf of it, to "reset" a node), and locks it
// again, so that no agent started meanwhile shares it; the queue is
// written there whole at its next push. It says whether the directory is
// there, and locked by this agent, again. It does nothing when the
// agent is closed, or when another agent has locked the new directory.
// A lock file removed alone is made and locked again the same way.
func (a *Agent) remakeStateDir() bool {
	dir := filepath.Dir(a.state)
	a.lockMu.Lock()
	defer a.lockMu.Unlock()
	if a.lock == nil {
		return false
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		a.log.Error("the state directory was removed while the agent ran and cannot be made again", "dir", dir, "err", err)
		return false
	}
	lock, err := lockStateDir(dir)
	if err != nil {
		a.log.Error("the state directory was removed while the agent ran; made it again, but cannot lock it", "dir", dir, "err", err)
		return false
	}
	a.lock.Close() // the removed directory's lock
	a.lock = lock
	if a.q != nil {
		a.q.lost()
	}
	a.log.Warn("the state directory was removed while the agent ran; made it again", "dir", dir)
	return true
}
