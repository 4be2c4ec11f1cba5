//go:build !linux

package probe

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/proofkit/nodekit/overload"
)

// Probe takes readings of the node it runs on. Probing needs Linux.
type Probe struct{}

// New returns an error wrapping errors.ErrUnsupported: probing needs Linux.
func New(cfg Config) (*Probe, error) {
	return nil, fmt.Errorf("probe: new on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// Read returns an error wrapping errors.ErrUnsupported.
func (p *Probe) Read(ctx context.Context) (overload.Reading, error) {
	return overload.Reading{}, fmt.Errorf("probe: read on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// Close does nothing off Linux.
func (p *Probe) Close() error { return nil }
