// Package notify delivers the platform's notices to the nodes'
// operators as Standard Webhooks messages (webhook-id,
// webhook-timestamp, webhook-signature: "v1," and the base64 HMAC-SHA256
// of id.timestamp.body).
//
// Who receives what is a Dispatch: the notify file's receivers (a line
// a node, or "*") with the operators' own beside them, and whether the
// ends of overloads are sent. A store is opened with the Dispatch (it
// implements store.Deliveries), so that the delivery of a notice is
// written in the same change as the notice. A Notifier is then made with
// the Dispatch and the store's outbox; on every replica it claims due
// deliveries, sends each to its receiver, a few at a time a receiver,
// and settles it: delivered, retried with back-off, or failed.
// Delivery is at least once, with a stable id a receiver drops repeats
// by.
//
//	d := notify.NewDispatch(cfg, rs)
//	st, err := filestore.Open(store.Config{StateDir: dir, Dispatch: d}, nil)
//	n := notify.New(cfg, d, st.Outbox(), log, nil)
//	go n.Run(ctx)
package notify
