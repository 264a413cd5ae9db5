-- Runs (docs/design.md, "Runs"; functions/engine_runs.sql).
--
-- A receive leases the consecutive unkeyed first deliveries it takes from a
-- lane with one deliveries row (a run: positions pos..last_pos), and an ack
-- that completes a whole run writes one acks row for it (pos..last_pos),
-- instead of a row per message each. Rows without last_pos are single
-- positions, as before: everything leased or completed before the upgrade
-- stays valid, and so do its receipts.
DO $runs$
DECLARE
    q record;
    sch text;
BEGIN
    FOR q IN SELECT id FROM sluice.queue ORDER BY id LOOP
        sch := 'sluice_q' || q.id;
        EXECUTE format('ALTER TABLE %I.deliveries ADD COLUMN last_pos bigint', sch);
        EXECUTE format('CREATE INDEX ON %I.deliveries (group_id, pos) WHERE last_pos IS NOT NULL', sch);
        EXECUTE format('ALTER TABLE %I.acks ADD COLUMN last_pos bigint', sch);
        EXECUTE format('CREATE INDEX ON %I.acks (group_id, pos) WHERE last_pos IS NOT NULL', sch);
    END LOOP;
END
$runs$;

-- e_current_deliveries returns the run of each delivery: drop its old
-- template (the queues' copies are dropped by _instantiate).
DROP FUNCTION IF EXISTS sluice_tmpl.e_current_deliveries(int, text[]);

-- Receipts of messages leased in a run name the run: _parse_receipts
-- returns it (a new result column).
DROP FUNCTION IF EXISTS sluice._parse_receipts(text[]);
