-- status says how many messages a group ever dead-lettered (issue 12: a
-- Prometheus counter of dead letters that counts every consumer, SQL ones
-- too, not only the HTTP server's requests).
--
-- * queue_status.dead_lettered: every dead letter recorded for the group,
--   redriven ones included (functions/engine_status.sql, e_status). Rows of
--   sluice.dead_letter go only with drop_group / drop_queue (seek_group
--   re-points them), so it only grows while the group exists. A new last
--   column; callers that name their columns are unaffected.
ALTER TYPE sluice.queue_status ADD ATTRIBUTE dead_lettered bigint;
