-- Engine v2: ordering keys and priorities (issue 37; docs/design.md,
-- "Engine v2", "Keys" and "Priorities").
--
-- * e2_held: a key a lane of a group holds back: its messages in flight are
--   positions pos of one lease (slot, lease_no), or, after a nack, its retry
--   is due at `until` (lease_no NULL). A key is held until those positions
--   are completed or that time has come.
-- * e2_wait: a keyed position the lane's cursor passed while its key was
--   held: delivered, in position order, once the key is free. attempt is
--   the attempt to deliver it as (NULL: the message's own).
-- * e2_level: how far a group has taken one priority level of the queue's
--   prioritized messages (every position of the level up to cursor).
-- * Queues of engine 2 made before this migration get the new columns:
--   msg.key, khash (hashtextextended(key, 0)), priority; batch.khashes (the
--   key hash of each position, NULL when none is keyed); lease.held and
--   waiting (the lane's state: NULL when empty), lease.levels (the
--   priority lane's state), and the table prio (the prioritized messages'
--   positions, by level), partitioned by slot like the others.
CREATE TYPE sluice.e2_held AS (khash bigint, slot smallint, lease_no bigint, until timestamptz, pos bigint[]);
CREATE TYPE sluice.e2_wait AS (pos bigint, khash bigint, id bigint, txid xid8, mslot smallint, attempt int);
CREATE TYPE sluice.e2_level AS (level int, cursor bigint);

DO $$
DECLARE
    q record;
    s int;
BEGIN
    FOR q IN SELECT qq.id FROM sluice.queue qq WHERE qq.engine = 2 ORDER BY qq.id LOOP
        EXECUTE format('ALTER TABLE %1$I.msg ADD COLUMN key text, ADD COLUMN khash bigint,
                                             ADD COLUMN priority int NOT NULL DEFAULT 0;
                        ALTER TABLE %1$I.batch ADD COLUMN khashes bigint[];
                        ALTER TABLE %1$I.lease ADD COLUMN held sluice.e2_held[], ADD COLUMN waiting sluice.e2_wait[],
                                               ADD COLUMN levels sluice.e2_level[];
                        CREATE TABLE %1$I.prio (
                            slot smallint NOT NULL, level int NOT NULL, pos bigint NOT NULL, id bigint NOT NULL,
                            txid xid8 NOT NULL, mslot smallint NOT NULL, cut_no bigint NOT NULL, target int,
                            PRIMARY KEY (level, pos, slot)
                        ) PARTITION BY LIST (slot);
                        CREATE INDEX ON %1$I.prio (pos);
                        CREATE INDEX ON %1$I.msg (txid) WHERE priority <> 0 AND khash IS NULL',
                       'sluice_q' || q.id);
        FOR s IN 0..(SELECT qq.slots - 1 FROM sluice.queue qq WHERE qq.id = q.id) LOOP
            EXECUTE format('CREATE TABLE %1$I.%2$I PARTITION OF %1$I.prio FOR VALUES IN (%3$s)',
                           'sluice_q' || q.id, 'prio_' || s, s);
        END LOOP;
    END LOOP;
END
$$;

-- Every call now works on engine 2 (keys, priorities, dedup, peek, leases,
-- purge, redrive): the helper that refused some with SL011 goes.
DROP FUNCTION IF EXISTS sluice._v2_unsupported(text);
