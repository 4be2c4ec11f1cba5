package pinproxy

import (
	"context"
	"testing"
	"time"
)

// newGoroutineTestProxy is newTestProxy relaying with goroutines rather
// than event loops.
func newGoroutineTestProxy(t *testing.T, up string) *Proxy {
	t.Helper()
	p, err := New(Config{Upstreams: []string{up}, RebalanceInterval: -1, ParkAfter: 50 * time.Millisecond, goroutines: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	return p
}
