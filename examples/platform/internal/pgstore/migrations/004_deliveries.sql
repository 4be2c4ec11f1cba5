-- the outbox: one row per message, written with its notice.
CREATE TABLE deliveries (
	id           text PRIMARY KEY,      -- webhook-id
	node         text NOT NULL,
	type         text NOT NULL,         -- node.overloaded, node.overload_ended
	at           timestamptz NOT NULL,  -- the notice's (or end's) time
	body         bytea NOT NULL,        -- the message, byte for byte as signed
	created_at   timestamptz NOT NULL,  -- when the platform decided it
	status       text NOT NULL,         -- pending, delivered, failed, undeliverable
	attempts     integer NOT NULL DEFAULT 0,
	next_at      timestamptz,           -- pending: due at (or leased until)
	last_status  integer,
	last_error   text,
	delivered_at timestamptz
);
CREATE INDEX deliveries_due ON deliveries (next_at) WHERE status = 'pending';
CREATE INDEX deliveries_by_node ON deliveries (node, created_at);
