package platformtest

import (
	"fmt"
	"testing"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/overload"
)

// OneTracker is what one tracker of node, with the default limits, fed
// readings in order, decides: its events, and how many notices it sends.
// A store that acknowledged those readings, whichever replicas, retries
// and batches carried them, holds the same.
func OneTracker(t testing.TB, node string, readings []overload.Reading) (events []overload.Event, notices int) {
	t.Helper()
	ref := overload.NewTracker(node, overload.Limits{})
	for i, r := range readings {
		res, err := ref.Observe(r)
		if err != nil {
			t.Fatalf("reference tracker of %s: reading %d: %v", node, i, err)
		}
		if res.Event != nil {
			events = append(events, *res.Event)
		}
		if res.Notice != nil {
			notices++
		}
	}
	return events, notices
}

// DiffEvents lists how node's stored events got differ from want, by
// kind and time in order; none when they agree.
func DiffEvents(node string, got []store.NumberedEvent, want []overload.Event) []string {
	var diffs []string
	if len(got) != len(want) {
		diffs = append(diffs, fmt.Sprintf("node %s: %d events, want %d", node, len(got), len(want)))
	}
	for i := range min(len(got), len(want)) {
		if e := got[i]; e.Kind != want[i].Kind || !e.At.Equal(want[i].At) {
			diffs = append(diffs, fmt.Sprintf("node %s: event %d: %s at %v, want %s at %v", node, i, e.Kind, e.At, want[i].Kind, want[i].At))
		}
	}
	return diffs
}
