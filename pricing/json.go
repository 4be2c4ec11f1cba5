package pricing

import (
	"encoding/json"
	"fmt"
	"time"
)

// HistoryVersion is the version of a History's JSON form, sent as "v".
const HistoryVersion = 1

// historyJSON is a History's JSON form.
type historyJSON struct {
	Version      int       `json:"v"`
	Window       string    `json:"window"` // a Go duration, "3h0m0s"
	PrunedBefore time.Time `json:"pruned_before,omitzero"`
	Changes      []Change  `json:"changes"`
}

// MarshalJSON encodes the history as
//
//	{"v":1,"window":"3h0m0s","pruned_before":"…","changes":[{"at":"…","price":100},…]}
//
// with times in UTC ("pruned_before" is left out until Prune is called), so
// that a platform can keep one per node in its own database.
func (h *History) MarshalJSON() ([]byte, error) {
	j := historyJSON{Version: HistoryVersion, Window: h.Window().String(), Changes: h.Changes()}
	if h.pruned {
		j.PrunedBefore = fromNanos(h.prunedBefore)
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encodes and validates it as Set
// and NewHistory would: a known version, a window within range, changes in
// strictly increasing time order, no negative price. On error h is left
// unchanged.
func (h *History) UnmarshalJSON(data []byte) error {
	var j historyJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("pricing: decode history: %w: %w", ErrInvalid, err)
	}
	if j.Version != HistoryVersion {
		return fmt.Errorf("pricing: decode history: version %d, want %d: %w", j.Version, HistoryVersion, ErrInvalid)
	}
	w, err := time.ParseDuration(j.Window)
	if err != nil {
		return fmt.Errorf("pricing: decode history: window: %w: %w", ErrInvalid, err)
	}
	if w == 0 {
		return fmt.Errorf("pricing: decode history: window is zero: %w", ErrInvalid)
	}
	nh, err := NewHistory(Config{Window: w})
	if err != nil {
		return fmt.Errorf("pricing: decode history: %w", err)
	}
	for i, c := range j.Changes {
		if err := nh.Set(c.At, c.Price); err != nil {
			return fmt.Errorf("pricing: decode history: change %d: %w", i, err)
		}
	}
	if !j.PrunedBefore.IsZero() {
		b, err := toNanos(j.PrunedBefore)
		if err != nil {
			return fmt.Errorf("pricing: decode history: pruned_before: %w", err)
		}
		nh.pruned, nh.prunedBefore = true, b
	}
	*h = *nh
	return nil
}

// UnmarshalJSON decodes a session and validates it: a start within the
// supported range, no negative locked price, an end (when there is one) not
// before the start.
func (s *Session) UnmarshalJSON(data []byte) error {
	type plain Session
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("pricing: decode session: %w: %w", ErrInvalid, err)
	}
	if _, _, err := Session(p).span(); err != nil {
		return fmt.Errorf("pricing: decode session: %w", err)
	}
	*s = Session(p)
	return nil
}
