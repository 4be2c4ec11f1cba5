package fleet

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/proofkit/nodekit/examples/platform/internal/notify"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
)

// Redeliver sends notice id again, with its first webhook-id, if keep
// (nil: any) keeps its node: a notice of another operator's node is not
// found, as one that does not exist. The delivery is due at once and
// keeps its log.
func (f *Fleet) Redeliver(ctx context.Context, id int64, keep func(node string) bool) error {
	// The same words for every notice an operator may not redeliver,
	// whether it is another operator's or none at all.
	notFound := fmt.Errorf("notice %w", store.ErrUnknown)
	if id < 1 {
		return notFound
	}
	ns, _, err := f.Store.Notices(ctx, id-1, 1)
	if err != nil {
		return err
	}
	if len(ns) == 0 || ns[0].ID != id || (keep != nil && !keep(ns[0].Node)) {
		return notFound
	}
	if f.Notify.Outbox() == nil {
		return fmt.Errorf("notice %d: %w (no deliveries: the platform runs without -notify-file)", id, store.ErrUnknown)
	}
	did := notify.NoticeID(ns[0].Node, ns[0].At)
	found, err := f.Notify.Outbox().Redeliver(ctx, did, f.Now())
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("notice %d: %w (no delivery: decided before the platform delivered notices)", id, store.ErrUnknown)
	}
	f.Log.Info("notice to be delivered again", "notice", id, "id", did, "node", ns[0].Node)
	f.Dispatch.Poke()
	return nil
}

// AddDeliveries sets each notice's delivery. A notice the outbox does not
// hold (decided before there was one) shows as undeliverable.
func AddDeliveries(ctx context.Context, box store.OutboxStore, ns []store.NumberedNotice) error {
	ids := make([]string, len(ns))
	for i, nt := range ns {
		ids[i] = notify.NoticeID(nt.Node, nt.At)
	}
	got, err := box.ByIDs(ctx, ids)
	if err != nil {
		return err
	}
	for i := range ns {
		v := store.DeliveryView{ID: ids[i], Type: store.TypeOverloaded, Status: store.StatusUndeliverable}
		if d, ok := got[ids[i]]; ok {
			v = d.View()
		}
		ns[i].Delivery = &v
	}
	return nil
}

// maxNodeDeliveries is how many of a node's deliveries /nodes/X shows.
const maxNodeDeliveries = 10

// nodeDeliveries is what /nodes/X shows of the node's deliveries.
func nodeDeliveries(ctx context.Context, box store.OutboxStore, node string) ([]store.DeliveryView, error) {
	ds, err := box.ByNode(ctx, node, maxNodeDeliveries)
	if err != nil {
		return nil, err
	}
	out := make([]store.DeliveryView, len(ds))
	for i := range ds {
		out[i] = ds[i].View()
	}
	return out, nil
}

// NotifyUnreached puts the operators' own receivers in force, and says
// at start which nodes have no receiver: their notices are kept, and
// marked undeliverable.
func (f *Fleet) NotifyUnreached(ctx context.Context, log *slog.Logger) {
	if err := f.RefreshReceivers(ctx); err != nil {
		log.Warn("notify: the operators' receivers not read", "err", err)
	}
	f.Notify.LogUnreached(ctx, log, f.Store.NodeIDs)
}
