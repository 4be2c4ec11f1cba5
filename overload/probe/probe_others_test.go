//go:build !linux

package probe

import (
	"context"
	"errors"
	"testing"
)

func TestUnsupported(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("New = %v, want an error wrapping errors.ErrUnsupported", err)
	}
	var p *Probe
	if _, err := p.Read(context.Background()); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Read = %v, want an error wrapping errors.ErrUnsupported", err)
	}
}
