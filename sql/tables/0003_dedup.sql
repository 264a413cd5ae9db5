-- Idempotent send: a per-queue table of deduplication keys, in the queue's
-- slots like everything that grows with traffic, and the window option.
ALTER TABLE sluice.queue ADD COLUMN dedup_window interval NOT NULL DEFAULT '1 hour';

DO $dedup$
DECLARE
    q record;
    s int;
BEGIN
    FOR q IN SELECT id FROM sluice.queue ORDER BY id LOOP
        EXECUTE format('CREATE TABLE %I.dedup (
                            slot      smallint NOT NULL,
                            dedup_key text NOT NULL,
                            msg_id    bigint NOT NULL,
                            at        timestamptz NOT NULL
                        ) PARTITION BY LIST (slot)', 'sluice_q' || q.id);
        EXECUTE format('CREATE INDEX ON %I.dedup (dedup_key, at)', 'sluice_q' || q.id);
        FOR s IN 0..3 LOOP
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.dedup FOR VALUES IN (%s)',
                           'sluice_q' || q.id, 'dedup_' || s, 'sluice_q' || q.id, s);
        END LOOP;
    END LOOP;
END
$dedup$;

-- send_batch gains per-message priorities and dedup keys: drop the old
-- signature so that the new one does not become an ambiguous overload.
DROP FUNCTION IF EXISTS sluice.send_batch(text, jsonb[], jsonb[], text[], interval);
