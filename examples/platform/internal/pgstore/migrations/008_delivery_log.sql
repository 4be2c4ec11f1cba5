-- each delivery keeps the log of its latest attempts: when, and the
-- status code or the error.
ALTER TABLE deliveries ADD COLUMN log jsonb NOT NULL DEFAULT '[]';
