-- a notice's number, the id GET /notices shows and pages by, is given
-- after the notice's transaction committed, by a short transaction of
-- its own (numberNotices), so the reports' transactions no longer wait
-- on one another's commits for it. Notices numbered before keep their
-- id as their number.
CREATE SEQUENCE notice_numbers;
ALTER TABLE notices ADD COLUMN num bigint;
UPDATE notices SET num = id;
SELECT setval('notice_numbers', (SELECT coalesce(max(id), 0) + 1 FROM notices), false);
CREATE UNIQUE INDEX notices_by_num ON notices (num);
CREATE INDEX notices_unnumbered ON notices (id) WHERE num IS NULL;
