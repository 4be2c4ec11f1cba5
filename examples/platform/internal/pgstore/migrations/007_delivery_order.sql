-- a node's messages are delivered in the order they were decided: seq is
-- the node's readings counted when its message was decided, and a claim
-- takes a node's message only once none decided before it is pending.
ALTER TABLE deliveries ADD COLUMN seq bigint NOT NULL DEFAULT 0;
CREATE INDEX deliveries_pending_by_node ON deliveries (node, seq) WHERE status = 'pending';
