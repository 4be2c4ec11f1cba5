//go:build !linux

package probe

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/proofkit/nodekit/overload"
)

// state is empty off Linux: New never returns a Probe.
type state struct{}

// unsupported returns an error wrapping errors.ErrUnsupported: probing
// needs Linux.
func unsupported(op string) error {
	return fmt.Errorf("probe: %s on %s: %w", op, runtime.GOOS, errors.ErrUnsupported)
}

func (p *Probe) open() error { return unsupported("new") }

func (p *Probe) read(context.Context) (overload.Reading, []LinkBytes, error) {
	return overload.Reading{}, nil, unsupported("read")
}

func (p *Probe) close() error { return nil }
