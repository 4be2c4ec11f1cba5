-- notices paged by time (GET /notices?after=…).
CREATE INDEX notices_by_time ON notices (at, node);
