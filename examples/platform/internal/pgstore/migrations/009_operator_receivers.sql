-- operators' own receivers of their nodes' notices, set through the API.
CREATE TABLE operator_receivers (
	operator   text PRIMARY KEY,
	body       jsonb NOT NULL,            -- URL, secrets (the newest first, a rotated one with its end), created
	updated_at timestamptz NOT NULL DEFAULT now()
);
