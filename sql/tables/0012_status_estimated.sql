-- status costs the same whatever the backlog not numbered yet (issue 12):
-- it reads at most sluice.status_exact_limit (10,000) of each kind of the
-- messages not numbered by a cut yet, and estimates the rest
-- (functions/engine_status.sql, e_unnumbered; docs/sql.md, sluice.status).
--
-- * queue_status.estimated: true when the row's ready and lag include such
--   an estimate (a new last column; callers that name their columns are
--   unaffected).
-- * e_key_waiting takes the keyed messages e_unnumbered read instead of
--   reading every message not numbered yet: drop its old template (the
--   queues' copies are dropped by _instantiate).
ALTER TYPE sluice.queue_status ADD ATTRIBUTE estimated boolean;
DROP FUNCTION IF EXISTS sluice_tmpl.e_key_waiting(int, bigint[], bigint[], bigint[], boolean[], xid8, xid8[],
                                                  timestamptz, timestamptz);
