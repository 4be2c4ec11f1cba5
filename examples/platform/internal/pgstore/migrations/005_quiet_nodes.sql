-- a node nothing can be planned for (neither overloaded nor paused) has
-- no next plan (NULL): its report rewrites its row without touching an
-- index, so PostgreSQL updates it in place in its page (a HOT update),
-- for which each page keeps room.
ALTER TABLE nodes ALTER COLUMN next_plan_at DROP NOT NULL;
DROP INDEX nodes_plan_due;
CREATE INDEX nodes_plan_due ON nodes (next_plan_at) WHERE role IS NOT NULL AND next_plan_at IS NOT NULL;
ALTER TABLE nodes SET (fillfactor = 70);
