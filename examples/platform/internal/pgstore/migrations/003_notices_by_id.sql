-- notices paged by id (their primary key), which grows with commits;
-- the index by time is no longer read.
DROP INDEX notices_by_time;
