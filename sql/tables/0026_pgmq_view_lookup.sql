-- sluice._remake_pgmq_view(text) asked whether a queue belongs to the pgmq
-- layer a second time after sluice.upgrade_queue had asked to lock its
-- view; sluice._pgmq_view answers both (functions/upgrade.sql), and the
-- callers make the view themselves.
DROP FUNCTION IF EXISTS sluice._remake_pgmq_view(text);
