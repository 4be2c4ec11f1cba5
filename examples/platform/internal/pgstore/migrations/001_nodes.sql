-- nodes, their routes, and the append-only events and notices.
CREATE TABLE nodes (
	id           text PRIMARY KEY,
	role         text,                  -- NULL: reports only, never planned
	country      text NOT NULL DEFAULT '',
	state        json NOT NULL,         -- tracker, prices, plan budgets (a node file without routes); json, not jsonb: kept as written, so a write-back is compared byte for byte and not parsed
	readings     bigint NOT NULL DEFAULT 0,
	overloaded   boolean NOT NULL DEFAULT false,
	next_plan_at timestamptz NOT NULL DEFAULT '-infinity',
	version      bigint NOT NULL DEFAULT 0,
	updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX nodes_plan_due ON nodes (next_plan_at) WHERE role IS NOT NULL;

CREATE TABLE routes (
	id           text PRIMARY KEY,
	node         text NOT NULL REFERENCES nodes (id),
	user_id      text NOT NULL,
	key          text NOT NULL,
	country      text NOT NULL,
	price        bigint NOT NULL,       -- the session's price when the node was last saved
	last_traffic timestamptz,
	relied_on    timestamptz,           -- a move on another node relies on this route since
	body         json NOT NULL,         -- route, session, earned
	closed_at    timestamptz,
	closed_by    json                   -- the plan's action
);
CREATE INDEX routes_live_by_node ON routes (node) WHERE closed_at IS NULL;
CREATE INDEX routes_alternatives ON routes (user_id, key, country, price) WHERE closed_at IS NULL;
CREATE INDEX routes_closed_by_node ON routes (node, closed_at) WHERE closed_at IS NOT NULL;

CREATE TABLE events (
	id   bigserial PRIMARY KEY,
	node text NOT NULL REFERENCES nodes (id),
	kind text NOT NULL,
	at   timestamptz NOT NULL,
	body jsonb NOT NULL
);
CREATE INDEX events_by_node ON events (node, id);

CREATE TABLE notices (
	id   bigserial PRIMARY KEY,
	node text NOT NULL REFERENCES nodes (id),
	at   timestamptz NOT NULL,
	body jsonb NOT NULL
);
CREATE INDEX notices_by_node ON notices (node, at);
