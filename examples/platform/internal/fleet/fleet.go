package fleet

import (
	"sync/atomic"

	"github.com/proofkit/nodekit/examples/platform/internal/notify"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// Fleet is the platform's use cases, each written once over a store.
// Each reads the clock once, through its store (see
// store.NodeStore.Update),
// and hands that time to the pure packages.
type Fleet struct {
	*store.Rules
	// Store is the store the use cases run on.
	Store store.Store
	// Dispatch is the notifier's: the receivers in force and its
	// wake-up (nil without a notifier).
	Dispatch *notify.Dispatch
	// Notify is the notifier delivering the store's outbox; nil: notices
	// are not delivered.
	Notify *notify.Notifier
	// receivers keeps the operators' own receivers: the store.
	receivers store.ReceiverStore
	// Owners is each node's operator as the route table names it, set
	// before the API is wired and not changed after; from then on
	// SetOwners puts in force the route table's and the token file's
	// together (OwnersNow).
	Owners map[string]string
	// owners is what SetOwners put in force; nil: Owners.
	owners atomic.Pointer[map[string]string]
}

// SetOwners puts owners in force as each node's operator: at once for
// the use cases, and for the operators' receivers from the next
// RefreshReceivers. owners is not changed afterwards.
func (f *Fleet) SetOwners(owners map[string]string) { f.owners.Store(&owners) }

// OwnersNow is each node's operator in force; the caller does not change
// it.
func (f *Fleet) OwnersNow() map[string]string {
	if p := f.owners.Load(); p != nil {
		return *p
	}
	return f.Owners
}

// New is the use cases over st, whose deliveries n delivers (nil:
// none).
func New(st store.Store, n *notify.Notifier) *Fleet {
	f := &Fleet{Rules: st.Base(), Store: st, receivers: st, Notify: n}
	if n != nil {
		f.Dispatch = n.Dispatch
		n.Attempted = f.attempted
		n.ReadOperator = st.OperatorReceiver
	}
	return f
}

// Every list the API serves (GET /nodes, /nodes/X/events, /notices,
// /plans) pages the same way. ?limit=N (1 to MaxPage, by default
// MaxPage) is the most items a page holds; a page that may be followed
// by more has a header Link: <PATH?after=CURSOR&limit=N>; rel="next",
// and a page without it is the last. The cursor is the list's own (a node
// id, an event id, a notice id): a client takes it from the Link as it
// is and never builds one.
const MaxPage = 1000
