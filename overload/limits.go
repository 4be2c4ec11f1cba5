package overload

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Limits are the thresholds of the checks and the rules of the window and
// the notices. The zero value of every field means its default, the
// platform's rule (see [DefaultLimits]); so Limits{} is the platform's
// rule, and Limits{MemoryPercent: 95} changes one threshold only.
type Limits struct {
	// MemoryPercent: the memory check passes when memory used is above
	// this percentage of MemTotal. Default 90.
	MemoryPercent float64 `json:"memory_percent,omitempty"`
	// LoadPerCPU: the load check passes when the 15-minute load average
	// is above this many times the CPU count. Default 2.
	LoadPerCPU float64 `json:"load_per_cpu,omitempty"`
	// ConntrackFillPercent: the conntrack fill check passes when the
	// table's entries are at or above this percentage of its max.
	// Default 80.
	ConntrackFillPercent float64 `json:"conntrack_fill_percent,omitempty"`
	// ConntrackDrops: the conntrack drops check passes when more than
	// this many connections were dropped because the table was full since
	// the previous reading. Default 0 (any drop passes), which is also
	// the zero value.
	ConntrackDrops uint64 `json:"conntrack_drops,omitempty"`
	// ListenDrops: the listen queue check passes when at least this many
	// connections were dropped by full listen queues since the previous
	// reading. Default 10; 0 means the default.
	ListenDrops uint64 `json:"listen_drops,omitempty"`
	// BandwidthPercent: the bandwidth check passes when, on any link, the
	// larger of the receive and transmit rates is above this percentage
	// of the link's speed (links are full duplex). Default 80.
	BandwidthPercent float64 `json:"bandwidth_percent,omitempty"`

	// Window is how many of the latest readings each check remembers.
	// Default 5.
	Window int `json:"window,omitempty"`
	// Need is in how many readings of its window a check must have
	// passed to hold. Default 3, or Window when Window is smaller; at
	// most Window.
	Need int `json:"need,omitempty"`
	// NoticeEvery is the least time between two notices for one node:
	// a start less than this after the previous notice produces an event
	// and no notice. Default one hour. In JSON it is a Go duration
	// string, "notice_every": "1h0m0s" (see [Limits.MarshalJSON]).
	NoticeEvery time.Duration `json:"-"`
	// MaxEvents bounds a tracker's event list; the oldest events are
	// dropped first. Default 100.
	MaxEvents int `json:"max_events,omitempty"`
}

// maxWindow bounds Window so a tracker's state stays small.
const maxWindow = 1000

// DefaultLimits returns the platform's rule, as the operators' help states
// it: memory over 90 %, a 15-minute load average above twice the CPU
// cores, the connection table 80 % full, any connection dropped by that
// table when full, 10 or more dropped by full listen queues, bandwidth
// over 80 % of the link speed; 3 of 5 readings; one notice an hour; the
// latest 100 events.
func DefaultLimits() Limits {
	return Limits{
		MemoryPercent:        90,
		LoadPerCPU:           2,
		ConntrackFillPercent: 80,
		ConntrackDrops:       0,
		ListenDrops:          10,
		BandwidthPercent:     80,
		Window:               5,
		Need:                 3,
		NoticeEvery:          time.Hour,
		MaxEvents:            100,
	}
}

// withDefaults returns l with every zero field replaced by its default
// (ConntrackDrops's default is its zero value). Need's default is at most
// Window.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	l.MemoryPercent = cmp.Or(l.MemoryPercent, d.MemoryPercent)
	l.LoadPerCPU = cmp.Or(l.LoadPerCPU, d.LoadPerCPU)
	l.ConntrackFillPercent = cmp.Or(l.ConntrackFillPercent, d.ConntrackFillPercent)
	l.ListenDrops = cmp.Or(l.ListenDrops, d.ListenDrops)
	l.BandwidthPercent = cmp.Or(l.BandwidthPercent, d.BandwidthPercent)
	l.Window = cmp.Or(l.Window, d.Window)
	l.Need = cmp.Or(l.Need, min(d.Need, l.Window))
	l.NoticeEvery = cmp.Or(l.NoticeEvery, d.NoticeEvery)
	l.MaxEvents = cmp.Or(l.MaxEvents, d.MaxEvents)
	return l
}

// Validate reports whether l, with its zero fields read as defaults, is a
// usable rule: percentages in (0, 100], a positive finite load factor,
// 1 ≤ Need ≤ Window ≤ 1000, and no negative durations or counts.
func (l Limits) Validate() error {
	l = l.withDefaults()
	var errs []error
	percent := func(name string, v float64) {
		if math.IsNaN(v) || v <= 0 || v > 100 {
			errs = append(errs, fmt.Errorf("%s is %v, want a percentage in (0, 100]", name, v))
		}
	}
	percent("memory percent", l.MemoryPercent)
	percent("conntrack fill percent", l.ConntrackFillPercent)
	percent("bandwidth percent", l.BandwidthPercent)
	if math.IsNaN(l.LoadPerCPU) || math.IsInf(l.LoadPerCPU, 0) || l.LoadPerCPU <= 0 {
		errs = append(errs, fmt.Errorf("load per cpu is %v, want a positive number", l.LoadPerCPU))
	}
	if l.Window < 1 || l.Window > maxWindow {
		errs = append(errs, fmt.Errorf("window is %d readings, want 1 to %d", l.Window, maxWindow))
	}
	if l.Need < 1 || l.Need > l.Window {
		errs = append(errs, fmt.Errorf("need is %d readings, want 1 to the window's %d", l.Need, l.Window))
	}
	if l.NoticeEvery < 0 {
		errs = append(errs, fmt.Errorf("notice every is %v, want zero (the default) or more", l.NoticeEvery))
	}
	if l.MaxEvents < 0 {
		errs = append(errs, fmt.Errorf("max events is %d, want zero (the default) or more", l.MaxEvents))
	}
	if len(errs) > 0 {
		return fmt.Errorf("overload: invalid limits: %w", errors.Join(errs...))
	}
	return nil
}

// limitsFields has Limits' fields without its methods.
type limitsFields Limits

// MarshalJSON encodes l with NoticeEvery as a Go duration string,
// "notice_every": "1h0m0s", left out when zero (the default).
func (l Limits) MarshalJSON() ([]byte, error) {
	v := struct {
		limitsFields
		NoticeEvery string `json:"notice_every,omitempty"`
	}{limitsFields: limitsFields(l)}
	if l.NoticeEvery != 0 {
		v.NoticeEvery = l.NoticeEvery.String()
	}
	return json.Marshal(v)
}

// UnmarshalJSON decodes MarshalJSON's encoding. A number for
// "notice_every" is read as nanoseconds, as limits were written before
// durations were strings.
func (l *Limits) UnmarshalJSON(b []byte) error {
	var v struct {
		limitsFields
		NoticeEvery json.RawMessage `json:"notice_every"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("decode limits: %w", err)
	}
	out := Limits(v.limitsFields)
	switch raw := bytes.TrimSpace(v.NoticeEvery); {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("decode limits: notice_every: %w", err)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("decode limits: notice_every: %w", err)
		}
		out.NoticeEvery = d
	default:
		var ns int64
		if err := json.Unmarshal(raw, &ns); err != nil {
			return fmt.Errorf("decode limits: notice_every: %s, want a duration such as \"1h\": %w", raw, err)
		}
		out.NoticeEvery = time.Duration(ns)
	}
	*l = out
	return nil
}
