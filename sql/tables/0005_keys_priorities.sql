-- Ordered keys and priorities (docs/design.md, "Keys" and "Priorities").
--
-- * batches carry each position's key hash and priority (NULL arrays when the
--   batch has none), so a receive walking the cursor needs no other lookup;
-- * keyed: a per-queue index of keyed positions (key hash, position), written
--   by the cut, to find a key's previous and next positions;
-- * prio: a per-queue index of unkeyed positions with a priority other than
--   0, written by the cut, read in (priority, position) order;
-- * deliveries record the key hash, and a row with token 0 is a parked
--   retry (an in-place nack of a keyed message) due at expires_at;
-- * group_states carry the blocked keys (bkeys, with the earliest incomplete
--   position of each in bheads) and, per priority level, the last position
--   dispatched out of position order (lv_prio, lv_pos).
-- Every new table is slot-partitioned and append-only, like the others.
DO $keys$
DECLARE
    q record;
    sch text;
    s int;
BEGIN
    FOR q IN SELECT id FROM sluice.queue ORDER BY id LOOP
        sch := 'sluice_q' || q.id;
        EXECUTE format('ALTER TABLE %I.batches ADD COLUMN keys bigint[], ADD COLUMN prios int[]', sch);
        EXECUTE format('ALTER TABLE %I.deliveries ADD COLUMN key_hash bigint', sch);
        EXECUTE format('ALTER TABLE %I.group_states ADD COLUMN bkeys bigint[], ADD COLUMN bheads bigint[],
                            ADD COLUMN lv_prio int[], ADD COLUMN lv_pos bigint[]', sch);
        EXECUTE format('CREATE TABLE %I.keyed (
                            slot     smallint NOT NULL,
                            key_hash bigint NOT NULL,
                            pos      bigint NOT NULL,
                            target   int,
                            mslot    smallint NOT NULL,
                            id       bigint NOT NULL,
                            txid     xid8 NOT NULL
                        ) PARTITION BY LIST (slot)', sch);
        EXECUTE format('CREATE INDEX ON %I.keyed (key_hash, pos)', sch);
        EXECUTE format('CREATE TABLE %I.prio (
                            slot     smallint NOT NULL,
                            priority int NOT NULL,
                            pos      bigint NOT NULL,
                            target   int,
                            mslot    smallint NOT NULL,
                            id       bigint NOT NULL,
                            txid     xid8 NOT NULL
                        ) PARTITION BY LIST (slot)', sch);
        EXECUTE format('CREATE INDEX ON %I.prio (priority, pos)', sch);
        FOR s IN 0..3 LOOP
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.keyed FOR VALUES IN (%s)', sch, 'keyed_' || s, sch, s);
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.prio FOR VALUES IN (%s)', sch, 'prio_' || s, sch, s);
        END LOOP;
    END LOOP;
END
$keys$;

-- e_group_state returns the new columns too: its old template cannot be
-- replaced in place (the queues' copies are dropped by _instantiate).
DROP FUNCTION IF EXISTS sluice_tmpl.e_group_state(sluice.consumer_group);
