-- Runs (docs/design.md, "Runs"; functions/engine_runs.sql).
--
-- A receive leases the consecutive unkeyed first deliveries it takes from a
-- lane with one row of a new table, runs (positions pos..last_pos), and an
-- ack that completes a whole run writes one row of another, run_acks,
-- instead of a deliveries and an acks row per message. Everything leased or
-- completed before the upgrade stays valid, and so do its receipts. The
-- tables of existing queues are made by sluice._instantiate, which every
-- migrate runs for every queue after loading the functions (so that their
-- definition is in one place, sluice._runs_ddl).

-- e_current_deliveries returns the run of each delivery: drop its old
-- template (the queues' copies are dropped by _instantiate).
DROP FUNCTION IF EXISTS sluice_tmpl.e_current_deliveries(int, text[]);

-- Receipts of messages leased in a run name the run: _parse_receipts
-- returns it (a new result column).
DROP FUNCTION IF EXISTS sluice._parse_receipts(text[]);
